//! The container backend beside raw runc, side by side in one run, on the
//! host's base system and a generated repository (200 files):
//!
//! * **exec**: `true` in a live container workspace (through the backend:
//!   its own cgroup, its status pipe, recorded in the evidence) against
//!   `runc exec ID /bin/true` into the same container (its seccomp filter,
//!   user namespace and cgroups: what the backend adds is what is measured),
//!   into a bare `runc spec` container beside it, and against `true` in a
//!   live namespace workspace; back to back, and spaced (each after an
//!   untimed pause, as an agent's tool calls come: the kernel's cgroup
//!   migration lock is back in its fast mode by then, which the first
//!   `cgroup.procs` write pays an RCU grace period to leave); each of the
//!   backend's execs also has one raw `runc exec` into the same container
//!   right before or right after it, in turn (paired: the same moments of a
//!   host whose speed drifts);
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

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_workspace::core::boundary::CommandSpec;
use agent_workspace::core::capacity::{Capacity, Resources};
use agent_workspace::core::contract::{Contract, SourceSection, TaskShape};
use agent_workspace::core::runner::{CommandIo, CreateOptions, Runner, RunnerConfig};
use agent_workspace::{container_stack, namespace_stack};
use bwrap::host_system;
use criterion::{Criterion, SamplingMode};
use runc::Container;
use timings::{SAMPLES, print_medians, record};

/// Execs one right after another: the backend's exec (each beside one raw
/// runc exec, see [`PAIRED`]), raw runc's into the same container, raw
/// runc's into a bare one.
const BACK_TO_BACK: [&str; 3] = [
    "exec, container workspace",
    "runc exec, same container",
    "runc exec, bare container",
];
/// The same, each after a pause of [`PAUSE`] (not timed), as an agent's tool
/// calls come.
const SPACED: [&str; 3] = [
    "spaced exec, container workspace",
    "spaced runc exec, same container",
    "spaced runc exec, bare container",
];
/// Raw runc's exec into the same container beside each of the backend's
/// (right before it or right after it, in turn), back to back and spaced: the
/// two compared over the same moments of a host whose speed drifts.
const PAIRED: [&str; 2] = [
    "runc exec, beside each exec",
    "spaced runc exec, beside each",
];
/// The pause before a spaced exec: longer than the kernel's RCU grace
/// periods, whatever state a write to `cgroup.procs` left them in.
const PAUSE: Duration = Duration::from_millis(50);
const EXEC_NAMESPACE: &str = "exec, namespace workspace";
const LIFE_OURS: &str = "workspace, one command";
const LIFE_RUNC: &str = "runc run + exec + delete";

/// `iters` times `exec`, each after `pause` (not counted): what each took.
fn paced(iters: u64, pause: Duration, mut exec: impl FnMut() -> Duration) -> Vec<Duration> {
    (0..iters)
        .map(|_| {
            std::thread::sleep(pause);
            exec()
        })
        .collect()
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    let Some(full) = timings::full_run(&mut criterion) else {
        return;
    };
    let root = support::bench_root("aw-bench-container-");
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
        let ours = |workspace: &mut agent_workspace::core::runner::Workspace| {
            let started = Instant::now();
            let outcome = rt
                .block_on(workspace.exec(&truth, CommandIo::captured()))
                .unwrap();
            let took = started.elapsed();
            assert_eq!(outcome.shell_status(), 0);
            took
        };
        // Raw runc into the container the backend made: the same seccomp
        // filter, user namespace and cgroups, without the backend.
        let same = live.run_id().to_string();
        for (pause, names, paired_name) in [
            (Duration::ZERO, BACK_TO_BACK, PAIRED[0]),
            (PAUSE, SPACED, PAIRED[1]),
        ] {
            let [ours_name, runc_name, bare_name] = names;
            group.bench_function(ours_name, |b| {
                b.iter_custom(|iters| {
                    let (batch, paired): (Vec<_>, Vec<_>) = (0..iters)
                        .map(|i| {
                            // Each goes first every other time (ABBA), so
                            // neither always comes after the other's work.
                            let mut theirs = || {
                                std::thread::sleep(pause);
                                runc::exec_true_in(&state, &same)
                            };
                            let before = (i % 2 == 1).then(&mut theirs);
                            std::thread::sleep(pause);
                            let took = ours(&mut live);
                            (took, before.unwrap_or_else(theirs))
                        })
                        .unzip();
                    record(paired_name, paired);
                    record(ours_name, batch)
                })
            });
            group.bench_function(runc_name, |b| {
                b.iter_custom(|iters| {
                    record(
                        runc_name,
                        paced(iters, pause, || runc::exec_true_in(&state, &same)),
                    )
                })
            });
            group.bench_function(bare_name, |b| {
                b.iter_custom(|iters| {
                    record(bare_name, paced(iters, pause, || container.exec_true()))
                })
            });
        }
        group.bench_function(EXEC_NAMESPACE, |b| {
            b.iter_custom(|iters| {
                record(
                    EXEC_NAMESPACE,
                    paced(iters, Duration::ZERO, || ours(&mut live_namespace)),
                )
            })
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
    let rows: Vec<_> = BACK_TO_BACK
        .into_iter()
        .chain(SPACED)
        .chain(PAIRED)
        .chain([EXEC_NAMESPACE, LIFE_OURS, LIFE_RUNC])
        .map(|n| (n, n.to_owned()))
        .collect();
    let medians = print_medians(&rows, 34, |_| "not run");
    println!();
    println!("== ratios of medians ==");
    for (label, ours, theirs) in [
        ("exec / runc exec", BACK_TO_BACK[0], BACK_TO_BACK[1]),
        ("exec / paired runc exec", BACK_TO_BACK[0], PAIRED[0]),
        ("exec / bare runc exec", BACK_TO_BACK[0], BACK_TO_BACK[2]),
        ("spaced exec / runc exec", SPACED[0], SPACED[1]),
        ("spaced exec / paired runc exec", SPACED[0], PAIRED[1]),
        ("spaced exec / bare runc exec", SPACED[0], SPACED[2]),
        (
            "namespace exec / runc exec",
            EXEC_NAMESPACE,
            BACK_TO_BACK[1],
        ),
        ("workspace / runc lifecycle", LIFE_OURS, LIFE_RUNC),
    ] {
        let (Some(a), Some(b)) = (medians.get(ours), medians.get(theirs)) else {
            println!("{label:<30} (not measured)");
            continue;
        };
        println!("{label:<30} {:>9.3}", a.as_secs_f64() / b.as_secs_f64());
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
    support::assert_nothing_left(&runtime, &cgroup_parent);
}

//! A workspace driven as an agent harness drives it, measured in one run:
//!
//! * **exec at once**: 16 `exec true` into one live workspace at once (16
//!   tasks sharing the [`Workspace`]) against the same 16 one after the other
//!   (goal: at most 0.6x on 2 cores);
//! * **output returned**: `exec` of a command writing 64 KiB with its output
//!   returned in the outcome ([`CommandIo::capturing`]) against the same exec
//!   keeping it in the evidence only (goal: at most 1.05x);
//! * **density**: 200 idle live workspaces of the default contract created
//!   and detached one after the other (each create timed; goal: median at
//!   most 25 ms), the memory of each (the PSS of every process in its
//!   cgroups; goal: at most 2 MiB), then all ended ([`Runner::end`]) and
//!   nothing left.
//!
//! Run with `cargo bench --bench harness` as root. `cargo test --benches`
//! runs every routine once, and the density part with 4 workspaces.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: failing loudly is right

mod support;
mod timings;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_workspace::core::boundary::CommandSpec;
use agent_workspace::core::runner::{CommandIo, CreateOptions, Workspace};
use criterion::{Criterion, SamplingMode};
use timings::{SAMPLES, median, ms, print_medians, record};

const AT_ONCE: &str = "16 exec true at once";
const RETURNED: &str = "exec, output returned";
const EVIDENCE_ONLY: &str = "exec, evidence only";
const ONE_BY_ONE: &str = "16 exec true one by one";
/// How many commands each routine runs.
const COMMANDS: usize = 16;

/// Runs [`COMMANDS`] `true`s in `workspace`, all at once or one after the
/// other; each must exit 0.
async fn sixteen(workspace: &Arc<Workspace>, at_once: bool) {
    let truth = CommandSpec::new(vec!["/bin/true".into()]);
    if at_once {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..COMMANDS {
            let (workspace, truth) = (Arc::clone(workspace), truth.clone());
            tasks.spawn(async move { workspace.exec(&truth, CommandIo::captured()).await });
        }
        while let Some(ended) = tasks.join_next().await {
            assert!(ended.unwrap().unwrap().succeeded());
        }
    } else {
        for _ in 0..COMMANDS {
            let outcome = workspace.exec(&truth, CommandIo::captured()).await;
            assert!(outcome.unwrap().succeeded());
        }
    }
}

/// The proportional set size of every process in run `run_id`'s cgroups
/// (its sandbox's pid 1 and whatever runs beside it), in bytes.
fn pss_of_run(run_id: &str) -> u64 {
    let needle = format!("/{run_id}/");
    let mut total = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        if !cgroups.contains(&needle) {
            continue;
        }
        let rollup =
            std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
        total += rollup
            .lines()
            .find_map(|line| line.strip_prefix("Pss:"))
            .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024);
    }
    total
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    let Some(full) = timings::full_run(&mut criterion) else {
        return;
    };
    let bench = support::LiveBench::new("harness");
    let (runner, runtime, cgroup_parent) = (&bench.runner, &bench.runtime, &bench.cgroup_parent);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let contract = || bench.contract();

    let workspace = Arc::new(
        rt.block_on(runner.create(contract(), CreateOptions::default()))
            .unwrap(),
    );
    {
        let mut group = criterion.benchmark_group("harness");
        group
            .sample_size(SAMPLES)
            .sampling_mode(SamplingMode::Flat)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(if full { 4 } else { 1 }));
        for (id, name, at_once) in [
            ("exec_16_at_once", AT_ONCE, true),
            ("exec_16_one_by_one", ONE_BY_ONE, false),
        ] {
            group.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    let batch = (0..iters)
                        .map(|_| {
                            let started = Instant::now();
                            rt.block_on(sixteen(&workspace, at_once));
                            started.elapsed()
                        })
                        .collect();
                    record(name, batch)
                });
            });
        }
        let writer = CommandSpec::new(vec![
            "/usr/bin/head".into(),
            "-c".into(),
            "65536".into(),
            "/dev/zero".into(),
        ]);
        for (id, name, returned) in [
            ("exec_output_returned", RETURNED, true),
            ("exec_evidence_only", EVIDENCE_ONLY, false),
        ] {
            group.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    let batch = (0..iters)
                        .map(|_| {
                            let io = if returned {
                                CommandIo::capturing()
                            } else {
                                CommandIo::captured()
                            };
                            let started = Instant::now();
                            let outcome = rt.block_on(workspace.exec(&writer, io)).unwrap();
                            let took = started.elapsed();
                            let got = outcome.output.map(|o| o.stdout.bytes.len());
                            assert_eq!(got, returned.then_some(65536));
                            took
                        })
                        .collect();
                    record(name, batch)
                });
            });
        }
        group.finish();
    }
    let workspace = Arc::try_unwrap(workspace).expect("the routines let go of it");
    let report = rt.block_on(workspace.finish()).unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    criterion.final_summary();

    println!();
    println!("== medians measured in this run ==");
    let rows = [AT_ONCE, ONE_BY_ONE, RETURNED, EVIDENCE_ONLY].map(|n| (n, n.to_owned()));
    let medians = print_medians(&rows, 26, |_| "not run");
    for (label, ours, theirs, goal) in [
        ("at once / one by one", AT_ONCE, ONE_BY_ONE, 0.6),
        ("returned / evidence only", RETURNED, EVIDENCE_ONLY, 1.05),
    ] {
        if let (Some(a), Some(b)) = (medians.get(ours), medians.get(theirs)) {
            let ratio = a.as_secs_f64() / b.as_secs_f64();
            println!("{label}: {ratio:.3} (goal: at most {goal})");
        }
    }

    // Density: idle live workspaces, as a harness keeps them between tool calls.
    let count = if full { 200 } else { 4 };
    let mut creates = Vec::with_capacity(count);
    let mut runs = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        let workspace = rt
            .block_on(runner.create(contract(), CreateOptions::default()))
            .unwrap();
        let detached = rt.block_on(workspace.detach()).unwrap();
        creates.push(started.elapsed());
        runs.push(detached.run_id);
    }
    let mut pss: Vec<u64> = runs.iter().map(|run| pss_of_run(run.as_str())).collect();
    assert!(
        pss.iter().all(|&bytes| bytes > 0),
        "a workspace with no process: {pss:?}"
    );
    creates.sort();
    pss.sort_unstable();
    let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
    println!();
    println!("== {count} idle live workspaces ==");
    println!(
        "create and detach: median {:.1} ms (goal: at most 25), p90 {:.1} ms, max {:.1} ms",
        ms(median(&creates)),
        ms(creates[creates.len() * 9 / 10]),
        ms(*creates.last().unwrap())
    );
    println!(
        "memory (PSS) per workspace: median {:.2} MiB (goal: at most 2), max {:.2} MiB, all {:.1} MiB",
        mib(pss[pss.len() / 2]),
        mib(*pss.last().unwrap()),
        mib(pss.iter().sum())
    );
    let started = Instant::now();
    for run in &runs {
        let report = rt.block_on(runner.end(run)).unwrap();
        assert!(report.cleaned, "{:?}", report.cleanup_errors);
    }
    println!("all ended in {:.2} s", started.elapsed().as_secs_f64());

    support::assert_nothing_left(runtime, cgroup_parent);
}

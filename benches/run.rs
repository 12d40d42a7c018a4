//! One whole agent run end to end, side by side in one run with what a user would
//! otherwise script, on the same generated repository (5,000 files, about 50 MB):
//!
//! * ours, layered: [`Runner::run`] over [`namespace_stack_layered`] (the base-tree
//!   cache warmed by one untimed run first): admit, checkout (shared base tree +
//!   per-run upper directory), seal and probe, `/bin/sh -c 'echo hi > x'`, export
//!   (patch and evidence, sealed), cleanup;
//! * ours, standalone: the same over [`namespace_stack`] (a full checkout per run);
//! * baseline: `git worktree add --detach <dir> HEAD`, then
//!   `bwrap --unshare-all --die-with-parent --ro-bind /usr /usr ... --bind <dir>
//!   /workspace --chdir /workspace /bin/sh -c 'echo hi > x'` (the same read-only
//!   base system as `benches/spawn.rs`), then `git -C <dir> add -A` and
//!   `git -C <dir> diff --cached --binary > patch`, then
//!   `git worktree remove --force <dir>`: each step one process, as a script runs it.
//!
//! Run with `cargo bench --bench run` (as root, or where the namespace backend can
//! run). `bwrap` is required (Debian: `apt-get install bubblewrap`): without it the
//! bench fails. Prints, after criterion's report, the medians measured in this same
//! run and the ratios ours / baseline, then checks that nothing was left behind: no
//! entry under the runtime's `runs/`, no run cgroup, no extra git worktree; the
//! bench's cgroup parent is removed at the end.
//!
//! Every routine times the whole run, from the first call to the last exit; `sync`
//! runs before each iteration, outside the timed region, so that no run pays for an
//! earlier one's writeback (checkouts written and deleted). The checks of each
//! run's result (exit 0, sealed evidence, one changed path, cleaned; a patch adding
//! `x` for the baseline) are made outside the timed region.
//!
//! `cargo test --benches` runs every routine once on a 200-file repository.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: failing loudly is right

mod bwrap;
mod support;

mod timings;

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_workspace::core::RunId;
use agent_workspace::core::boundary::CommandSpec;
use agent_workspace::core::capacity::{Capacity, Resources};
use agent_workspace::core::contract::{Contract, SourceSection, TaskShape};
use agent_workspace::core::runner::{
    CommandIo, CreateOptions, RUNS_DIR, RunReport, Runner, RunnerConfig,
};
use agent_workspace::namespace::cgroup::{CgroupLayout, leaked_paths, remove_parent};
use agent_workspace::{namespace_stack, namespace_stack_layered};
use bwrap::{WORKSPACE, host_system};
use criterion::{Criterion, SamplingMode};
use support::GeneratedRepo;
use timings::{SAMPLES, ms, print_medians, record};
use tokio::runtime::Runtime;

/// The agent's command, in both.
const SCRIPT: &str = "echo hi > x";

const LAYERED: &str = "ours, layered (warm cache)";
const STANDALONE: &str = "ours, standalone";
const BASELINE: &str = "worktree + bwrap + diff";

/// The bwrap command line running [`SCRIPT`] in `workspace`, with the read-only
/// base system of `benches/spawn.rs`.
fn bwrap_command(system: &[(&str, Option<String>)], workspace: &Path) -> Command {
    let mut command = bwrap::command(system, workspace);
    command.args(["--chdir", WORKSPACE, "/bin/sh", "-c", SCRIPT]);
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// Runs `command`, panicking with its stderr when it fails; returns its stdout.
fn output(mut command: Command) -> Vec<u8> {
    let out = command
        .stdin(Stdio::null())
        .output()
        .expect("run a baseline tool");
    assert!(
        out.status.success(),
        "{command:?}: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    out.stdout
}

/// Flushes dirty pages so that no iteration pays for an earlier one's writeback
/// (its checkout's files and their deletion); untimed.
fn settle() {
    let _ = Command::new("sync").status();
}

/// Where every path of the run lives, and fresh names under it.
struct Fixture {
    root: tempfile::TempDir,
    repo: GeneratedRepo,
    runtime: PathBuf,
    evidence: PathBuf,
    cgroup_parent: String,
    system: Vec<(&'static str, Option<String>)>,
    next: Cell<usize>,
}

impl Fixture {
    /// A path that does not exist yet, under `kind/`.
    fn fresh(&self, kind: &str) -> PathBuf {
        let n = self.next.get();
        self.next.set(n + 1);
        let parent = self.root.path().join(kind);
        std::fs::create_dir_all(&parent).unwrap();
        parent.join(format!("{n:06}"))
    }

    fn contract(&self) -> Contract {
        Contract::preset(
            TaskShape::NarrowFix,
            "run bench",
            SourceSection::new(self.repo.path.to_string_lossy(), "HEAD"),
        )
    }

    fn runner(&self, stack: agent_workspace::core::boundary::Stack) -> Runner {
        Runner::new(
            stack,
            RunnerConfig::new(&self.runtime, &self.evidence),
            Arc::new(Capacity::new(Resources {
                cpu_millis: u64::MAX / 4,
                memory_bytes: u64::MAX / 4,
                disk_bytes: u64::MAX / 4,
                slots: 1024,
            })),
        )
    }

    /// The baseline, untimed checks included: returns its duration.
    fn baseline(&self) -> Duration {
        let dir = self.fresh("worktrees");
        let patch = self.root.path().join("baseline.patch");
        settle();
        let started = Instant::now();
        let mut add = support::git(&self.repo.path);
        add.args(["worktree", "add", "-q", "--detach"])
            .arg(&dir)
            .arg("HEAD");
        output(add);
        output(bwrap_command(&self.system, &dir));
        let mut stage = support::git(&dir);
        stage.args(["add", "-A"]);
        output(stage);
        let mut diff = support::git(&dir);
        diff.args(["diff", "--cached", "--binary"])
            .stdout(std::fs::File::create(&patch).unwrap());
        let status = diff.stdin(Stdio::null()).status().unwrap();
        assert!(status.success(), "{diff:?}: {status}");
        let mut remove = support::git(&self.repo.path);
        remove.args(["worktree", "remove", "--force"]).arg(&dir);
        output(remove);
        let elapsed = started.elapsed();
        let text = std::fs::read_to_string(&patch).unwrap();
        assert!(
            text.contains("+++ b/x") && text.contains("+hi"),
            "baseline patch: {text}"
        );
        assert!(!dir.exists(), "{} remains", dir.display());
        elapsed
    }
}

/// The agent's command for our runs.
fn command() -> CommandSpec {
    CommandSpec::new(vec!["/bin/sh".into(), "-c".into(), SCRIPT.into()])
}

/// One of our runs, timed; its result is checked after the clock stops.
fn time_ours(
    rt: &Runtime,
    runner: &Runner,
    fixture: &Fixture,
    spec: &CommandSpec,
    ids: &mut Vec<RunId>,
) -> Duration {
    let contract = fixture.contract();
    settle();
    let started = Instant::now();
    let report = rt
        .block_on(runner.run(
            contract,
            spec,
            CommandIo::captured(),
            CreateOptions::default(),
        ))
        .unwrap();
    let elapsed = started.elapsed();
    check(&report);
    ids.push(report.run_id);
    elapsed
}

/// A run that did what it should: exit 0, one changed path, sealed, cleaned.
fn check(report: &RunReport) {
    let last = report.last_command().expect("the command ran");
    assert!(last.succeeded(), "{:?}", report.outcome);
    assert!(report.evidence_sealed, "{report:?}");
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    assert_eq!(report.outcome.changed_paths, 1, "{:?}", report.outcome);
    assert!(
        report.outcome.patch_sha256.is_some(),
        "{:?}",
        report.outcome
    );
    assert!(report.outcome.errors.is_empty(), "{:?}", report.outcome);
}

/// Panics unless `bwrap` runs here, saying how to install it.
fn require_bwrap(fixture: &Fixture) -> String {
    let version = match Command::new("bwrap").arg("--version").output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        _ => panic!(
            "bwrap not found on PATH: the run bench needs it for its baseline; \
             install bubblewrap (Debian: apt-get install bubblewrap)"
        ),
    };
    let dir = fixture.fresh("bwrap-check");
    std::fs::create_dir_all(&dir).unwrap();
    let out = bwrap_command(&fixture.system, &dir).output().unwrap();
    assert!(
        out.status.success(),
        "{version} does not run here ({}: {}); the run bench needs a working bubblewrap",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    version
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    let Some(full) = timings::full_run(&mut criterion) else {
        return;
    };
    let (files, dirs, bytes_per_file) = if full {
        (5_000, 200, 10_000)
    } else {
        (200, 20, 1_000)
    };

    // Mode 0755 (not a private temporary directory's 0700): the run's mapped ids
    // must be able to reach the checkout.
    let root = support::bench_root("aw-run-bench-");
    let repos = root.path().join("repos");
    std::fs::create_dir(&repos).unwrap();
    let started = Instant::now();
    let repo = support::generate(&repos, files, dirs, bytes_per_file);
    let generated = started.elapsed();
    let fixture = Fixture {
        runtime: root.path().join("runtime"),
        evidence: root.path().join("evidence"),
        cgroup_parent: format!("aw-bench-run-{}", std::process::id()),
        system: host_system(),
        repo,
        root,
        next: Cell::new(0),
    };
    println!(
        "run bench: temporary files under {}",
        fixture.root.path().display()
    );
    println!(
        "  repository: {files} files, {dirs} directories, {:.0} MB (generated in {:.1} s)",
        (files * bytes_per_file) as f64 / 1e6,
        generated.as_secs_f64()
    );
    println!("  base system as on this host: {:?}", fixture.system);
    println!("  {}", require_bwrap(&fixture));
    println!("  cgroup parent: {}", fixture.cgroup_parent);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let layered = fixture.runner(
        namespace_stack_layered(
            &fixture.cgroup_parent,
            fixture.root.path().join("cache"),
            1 << 30,
        )
        .unwrap(),
    );
    let standalone = fixture.runner(namespace_stack(&fixture.cgroup_parent).unwrap());
    let spec = command();
    let mut ids = Vec::new();

    // Untimed: each path works, and the layered run populates the base-tree cache.
    let cold = time_ours(&rt, &layered, &fixture, &spec, &mut ids);
    let first_standalone = time_ours(&rt, &standalone, &fixture, &spec, &mut ids);
    let first_baseline = fixture.baseline();
    println!(
        "  first runs (untimed): layered {:.0} ms (cold cache), standalone {:.0} ms, baseline {:.0} ms",
        ms(cold),
        ms(first_standalone),
        ms(first_baseline)
    );

    {
        let mut group = criterion.benchmark_group("run");
        group
            .sample_size(SAMPLES)
            .sampling_mode(SamplingMode::Flat)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(if full { 8 } else { 1 }));
        for (id, name, runner) in [
            ("layered", LAYERED, &layered),
            ("standalone", STANDALONE, &standalone),
        ] {
            group.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    let mut batch = Vec::new();
                    for _ in 0..iters {
                        batch.push(time_ours(&rt, runner, &fixture, &spec, &mut ids));
                    }
                    record(name, batch)
                });
            });
        }
        group.bench_function("baseline", |b| {
            b.iter_custom(|iters| {
                let batch = (0..iters).map(|_| fixture.baseline()).collect();
                record(BASELINE, batch)
            });
        });
        group.finish();
    }
    criterion.final_summary();

    print_table(full, files);
    let left = left_behind(&fixture, &ids);
    drop((layered, standalone, rt));
    let parent = CgroupLayout::detect()
        .map_err(|e| e.to_string())
        .and_then(|layout| {
            remove_parent(&layout, &fixture.cgroup_parent).map_err(|e| e.to_string())
        });
    println!();
    println!("== left behind ({} runs of ours) ==", ids.len());
    match (&left[..], parent) {
        ([], Ok(())) => println!(
            "nothing: no runs/ entries, no run cgroups, no extra worktrees; cgroup parent {} removed",
            fixture.cgroup_parent
        ),
        (left, parent) => {
            for line in left {
                println!("  {line}");
            }
            if let Err(e) = parent {
                println!("  removing cgroup parent {}: {e}", fixture.cgroup_parent);
            }
            panic!("the run bench left things behind");
        }
    }
    println!("(removing {} ...)", fixture.root.path().display());
}

/// What remains of the runs that should not: entries under `<runtime>/runs`, run
/// cgroups, git worktrees besides the repository's own.
fn left_behind(fixture: &Fixture, ids: &[RunId]) -> Vec<String> {
    let mut left = Vec::new();
    let runs = fixture.runtime.join(RUNS_DIR);
    if let Ok(entries) = std::fs::read_dir(&runs) {
        for entry in entries {
            left.push(format!("run directory {}", entry.unwrap().path().display()));
        }
    }
    let layout = CgroupLayout::detect().unwrap();
    for id in ids {
        for path in leaked_paths(&layout, &fixture.cgroup_parent, id).unwrap() {
            left.push(format!("cgroup {}", path.display()));
        }
    }
    let mut list = support::git(&fixture.repo.path);
    list.args(["worktree", "list", "--porcelain"]);
    let text = String::from_utf8(output(list)).unwrap();
    let worktrees = text.lines().filter(|l| l.starts_with("worktree ")).count();
    if worktrees != 1 {
        left.push(format!("git worktrees: {text}"));
    }
    left
}

fn print_table(full: bool, files: usize) {
    println!();
    println!(
        "== run: one whole run of `{SCRIPT}` on {files} files, medians measured in this run (warm-up excluded) =="
    );
    let rows = [LAYERED, STANDALONE, BASELINE].map(|n| (n, n.to_owned()));
    let medians = print_medians(&rows, 28, |_| "not run");

    println!();
    println!("== ratios of medians (ours / baseline) ==");
    for (label, num) in [
        ("layered / baseline", LAYERED),
        ("standalone / baseline", STANDALONE),
    ] {
        let (Some(a), Some(b)) = (medians.get(num), medians.get(BASELINE)) else {
            println!("{label:<28} (not measured)");
            continue;
        };
        println!("{label:<28} {:>9.3}", a.as_secs_f64() / b.as_secs_f64());
    }
    if !full {
        println!(
            "(test mode: {files} files, one iteration each; run `cargo bench --bench run` for figures)"
        );
    }
}

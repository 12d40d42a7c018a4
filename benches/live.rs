//! A live workspace, side by side in one run with what a user would otherwise
//! reach for:
//!
//! * **exec**: `true` in a live workspace ([`Workspace::exec`]: journal,
//!   evidence record of the command, join, exit) against `runc exec` into a
//!   running container (a bundle over the same read-only base system) and
//!   `nsenter` into the very namespaces of our workspace's pid 1 (the floor:
//!   no record, no cgroup, no privilege drop);
//! * **postgres**: a fresh workspace of `examples/contracts/postgres.toml` until
//!   it is sealed with its database ready ([`Runner::create`]; its cluster the
//!   host's template, made by the first run in the warm-up, under a layer of
//!   the run's own) against `pg_ctl start -w` on a data directory prepared once
//!   on the host with the same `initdb` settings;
//! * **run**: a whole one-shot `run -- true` ([`Runner::run`], layered checkout,
//!   evidence, cleanup) against a bare `bwrap --unshare-all true`, measured
//!   alone and right after each run (paired: the same moments of the host).
//!
//! Run with `cargo bench --bench live` as root. Needs `runc`, `bwrap` and
//! `nsenter` (Debian: `runc`, `bubblewrap`, `util-linux`) and PostgreSQL
//! (`postgresql`); a missing tool fails the bench naming the package. Prints,
//! after criterion's report, the medians measured in this same run and the
//! ratios, then checks that nothing was left behind.
//!
//! `cargo test --benches` runs every routine once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: failing loudly is right

mod bwrap;
mod runc;
mod support;
mod timings;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agent_workspace::core::boundary::CommandSpec;
use agent_workspace::core::contract::{Contract, SourceSection};
use agent_workspace::core::runner::{CommandIo, CreateOptions, RUNS_DIR};
use bwrap::host_system;
use criterion::{Criterion, SamplingMode};
use runc::{Container, succeed, timed};
use timings::{SAMPLES, print_medians, record};

const EXEC_OURS: &str = "exec, live workspace";
const EXEC_RUNC: &str = "runc exec";
const EXEC_NSENTER: &str = "nsenter (same namespaces)";
const PG_OURS: &str = "create to ready postgres";
const PG_HOST: &str = "pg_ctl start (prepared)";
const RUN_OURS: &str = "run -- true";
const RUN_BWRAP: &str = "bwrap --unshare-all true";
const RUN_BWRAP_PAIRED: &str = "bwrap, right after each run";

/// Fails unless `program` runs, naming the Debian package that has it.
/// A bare `bwrap --unshare-all true` over the host's root, read-only.
fn bare_bwrap() -> Command {
    let mut command = Command::new("bwrap");
    command.args(["--unshare-all", "--ro-bind", "/", "/", "/bin/true"]);
    command
}

fn require(program: &str, args: &[&str], package: &str) {
    let ran = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(
        ran.is_ok_and(|s| s.success()),
        "the live bench needs {program} (Debian package {package})"
    );
}

/// A host PostgreSQL data directory prepared once (as user `postgres`, which
/// PostgreSQL needs: it refuses root), started and stopped by `pg_ctl`.
struct HostCluster {
    data: PathBuf,
    bin: PathBuf,
    _dir: tempfile::TempDir,
}

impl HostCluster {
    fn prepare() -> Self {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("the live bench needs PostgreSQL (Debian package postgresql)")
            .flatten()
            .map(|e| e.path().join("bin"))
            .max()
            .unwrap();
        let dir = tempfile::Builder::new()
            .prefix("aw-bench-pg-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let data = dir.path().join("data");
        succeed(
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(bin.join("initdb"))
                .args(["-D"])
                .arg(&data)
                .args(["-A", "trust", "--no-sync", "--no-instructions"])
                .arg("--wal-segsize=1"),
        );
        Self {
            data,
            bin,
            _dir: dir,
        }
    }

    fn pg_ctl(&self, verb: &str) -> Command {
        let mut command = Command::new("runuser");
        command
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(&self.data)
            .args(["-w", "-s", verb]);
        command
    }

    /// `pg_ctl start -w` with the example's settings (timed), then `stop`.
    fn start_and_stop(&self) -> Duration {
        let socket = self.data.parent().unwrap();
        let options = format!(
            "-k {} -c listen_addresses='' -c fsync=off -c full_page_writes=off",
            socket.display()
        );
        let took = timed(self.pg_ctl("start").arg("-o").arg(options));
        succeed(&mut self.pg_ctl("stop"));
        took
    }
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    let Some(full) = timings::full_run(&mut criterion) else {
        return;
    };
    require("runc", &["--version"], "runc");
    require("bwrap", &["--version"], "bubblewrap");
    require("nsenter", &["--version"], "util-linux");
    let bench = support::LiveBench::new("live");
    let (runner, runtime, cgroup_parent) = (&bench.runner, &bench.runtime, &bench.cgroup_parent);
    let root = &bench.root;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let contract = || bench.contract();
    let postgres = || {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/contracts/postgres.toml"),
        )
        .unwrap();
        let mut contract = Contract::from_toml(&text).unwrap();
        contract.source = SourceSection::new(bench.repo.path.to_string_lossy(), "HEAD");
        contract
    };
    let truth = CommandSpec::new(vec!["/bin/true".into()]);
    let system = host_system();

    let live = rt
        .block_on(runner.create(contract(), CreateOptions::default()))
        .unwrap();
    let sandbox: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            runtime
                .join(RUNS_DIR)
                .join(live.run_id().as_str())
                .join("sandbox.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let pid1 = sandbox["pid"].as_u64().unwrap().to_string();
    let container = Container::start(&system);
    let cluster = HostCluster::prepare();
    println!(
        "live bench: temporary files under {}",
        root.path().display()
    );

    {
        let mut group = criterion.benchmark_group("live");
        group
            .sample_size(SAMPLES)
            .sampling_mode(SamplingMode::Flat)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(if full { 4 } else { 1 }));
        group.bench_function("exec_ours", |b| {
            b.iter_custom(|iters| {
                let batch = (0..iters)
                    .map(|_| {
                        let started = Instant::now();
                        let outcome = rt
                            .block_on(live.exec(&truth, CommandIo::captured()))
                            .unwrap();
                        let took = started.elapsed();
                        assert_eq!(outcome.shell_status(), 0);
                        took
                    })
                    .collect();
                record(EXEC_OURS, batch)
            });
        });
        group.bench_function("exec_runc", |b| {
            b.iter_custom(|iters| {
                record(
                    EXEC_RUNC,
                    (0..iters).map(|_| container.exec_true()).collect(),
                )
            });
        });
        group.bench_function("exec_nsenter", |b| {
            b.iter_custom(|iters| {
                let batch = (0..iters)
                    .map(|_| {
                        timed(
                            Command::new("nsenter")
                                .args(["-t", &pid1, "-U", "-m", "-n", "-u", "-i", "-p"])
                                .args(["-S", "1000", "-G", "1000", "--", "/bin/true"]),
                        )
                    })
                    .collect();
                record(EXEC_NSENTER, batch)
            });
        });
        group.bench_function("postgres_ours", |b| {
            b.iter_custom(|iters| {
                let batch = (0..iters)
                    .map(|_| {
                        let started = Instant::now();
                        let workspace = rt
                            .block_on(runner.create(postgres(), CreateOptions::default()))
                            .unwrap();
                        let took = started.elapsed();
                        let report = rt.block_on(workspace.finish()).unwrap();
                        assert!(report.cleaned && report.outcome.failure.is_none());
                        took
                    })
                    .collect();
                record(PG_OURS, batch)
            });
        });
        group.bench_function("postgres_host", |b| {
            b.iter_custom(|iters| {
                record(
                    PG_HOST,
                    (0..iters).map(|_| cluster.start_and_stop()).collect(),
                )
            });
        });
        // Each run is followed by one bare `bwrap`, so the two are also
        // compared over the same moments of a host whose speed drifts.
        group.bench_function("run_ours", |b| {
            b.iter_custom(|iters| {
                let (batch, paired): (Vec<_>, Vec<_>) = (0..iters)
                    .map(|_| {
                        let started = Instant::now();
                        let report = rt
                            .block_on(runner.run(
                                contract(),
                                &truth,
                                CommandIo::captured(),
                                CreateOptions::default(),
                            ))
                            .unwrap();
                        let took = started.elapsed();
                        assert!(report.cleaned);
                        (took, timed(&mut bare_bwrap()))
                    })
                    .unzip();
                record(RUN_BWRAP_PAIRED, paired);
                record(RUN_OURS, batch)
            });
        });
        group.bench_function("run_bwrap", |b| {
            b.iter_custom(|iters| {
                let batch = (0..iters).map(|_| timed(&mut bare_bwrap())).collect();
                record(RUN_BWRAP, batch)
            });
        });
        group.finish();
    }
    criterion.final_summary();
    let report = rt.block_on(live.finish()).unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    drop(container);

    println!();
    println!("== live: medians measured in this run (warm-up excluded) ==");
    let rows = [
        EXEC_OURS,
        EXEC_RUNC,
        EXEC_NSENTER,
        PG_OURS,
        PG_HOST,
        RUN_OURS,
        RUN_BWRAP,
        RUN_BWRAP_PAIRED,
    ]
    .map(|n| (n, n.to_owned()));
    let medians = print_medians(&rows, 28, |_| "not run");
    println!();
    println!("== ratios of medians ==");
    for (label, ours, theirs) in [
        ("exec / runc exec", EXEC_OURS, EXEC_RUNC),
        ("exec / nsenter", EXEC_OURS, EXEC_NSENTER),
        ("postgres / pg_ctl start", PG_OURS, PG_HOST),
        ("run -- true / bwrap", RUN_OURS, RUN_BWRAP),
        ("run -- true / paired bwrap", RUN_OURS, RUN_BWRAP_PAIRED),
    ] {
        let (Some(a), Some(b)) = (medians.get(ours), medians.get(theirs)) else {
            println!("{label:<28} (not measured)");
            continue;
        };
        println!("{label:<28} {:>9.3}", a.as_secs_f64() / b.as_secs_f64());
    }
    support::assert_nothing_left(runtime, cgroup_parent);
}

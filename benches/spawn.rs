//! Starting `/bin/true` isolated, side by side in one run: our [`spawn`] (with the
//! default seccomp filter) against `bwrap --unshare-all` with the same file system,
//! and against `unshare` with no mounts at all (the floor). A second group adds
//! 500 and 2,000 read-only binds of small directories to both, to show that setup
//! time grows linearly with the number of grants.
//!
//! Run with `cargo bench --bench spawn` (as root, or where unprivileged user
//! namespaces are allowed). Prints, after criterion's report, a table of medians and
//! ratios measured in this same run. Without `bwrap` on `PATH` (Debian:
//! `apt-get install bubblewrap`) the bwrap rows are skipped, and say so.
//!
//! What each routine times:
//! * spawn: from the [`spawn`] call to [`SpawnedChild::wait`](agent_workspace::namespace::spawn::SpawnedChild::wait)
//!   returning (plan preparation, seccomp filter build, clone, mounts, exec, exit);
//! * bwrap and unshare: `Command::status()` (fork, exec of the tool, its setup, the
//!   command, wait), stdio on `/dev/null` as for spawn.
//!
//! `cargo test --benches` runs every routine once, with 20 and 80 grants.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: failing loudly is right

mod bwrap;
mod timings;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agent_workspace::core::evidence::ExitStatusRecord;
use agent_workspace::core::mount_plan::{MountAction, MountPlan, MountStep, Reason};
use agent_workspace::namespace::spawn::{SpawnRequest, spawn};
use bwrap::{WORKSPACE, host_system};
use criterion::{Criterion, SamplingMode};
use timings::{SAMPLES, print_medians, record};

/// The program every routine runs, inside.
const TRUE: &str = "/bin/true";
/// Device nodes of bwrap's `--dev` (and of our plans' minimal `/dev`).
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

const SPAWN: &str = "spawn";
const BWRAP: &str = "bwrap --unshare-all";
const UNSHARE: &str = "unshare (no mounts)";
const SPAWN_SMALL: &str = "spawn + small grants";
const SPAWN_LARGE: &str = "spawn + large grants";
const BWRAP_SMALL: &str = "bwrap + small grants";
const BWRAP_LARGE: &str = "bwrap + large grants";

fn step(target: impl Into<String>, action: MountAction, reason: Reason) -> MountStep {
    MountStep {
        target: target.into(),
        action,
        reason,
    }
}

/// The plan equivalent to [`bwrap_command`]: `/usr` and the host's `/bin`, `/lib`,
/// ... read-only, a fresh `/proc`, a minimal `/dev`, a tmpfs `/tmp`, the workspace
/// read-write, then each grant read-only at the same place under the workspace.
fn plan(system: &[(&str, Option<String>)], workspace: &Path, grants: &[String]) -> MountPlan {
    let mut steps = vec![step(
        "/usr",
        MountAction::Bind {
            source: "/usr".into(),
            read_only: true,
        },
        Reason::System,
    )];
    for (path, link) in system {
        steps.push(match link {
            Some(to) => step(
                *path,
                MountAction::Symlink { to: to.clone() },
                Reason::System,
            ),
            None => step(
                *path,
                MountAction::Bind {
                    source: path.into(),
                    read_only: true,
                },
                Reason::System,
            ),
        });
    }
    steps.push(step("/proc", MountAction::Proc, Reason::Proc));
    steps.push(step(
        "/dev",
        MountAction::Tmpfs {
            size_bytes: 64 << 10,
            mode: 0o755,
        },
        Reason::Dev,
    ));
    for device in DEVICES {
        steps.push(step(
            format!("/dev/{device}"),
            MountAction::Device {
                source: format!("/dev/{device}").into(),
            },
            Reason::Dev,
        ));
    }
    for (link, to) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        steps.push(step(
            format!("/dev/{link}"),
            MountAction::Symlink { to: to.into() },
            Reason::Dev,
        ));
    }
    steps.push(step(
        "/tmp",
        MountAction::Tmpfs {
            size_bytes: 1 << 30,
            mode: 0o1777,
        },
        Reason::Tmp,
    ));
    steps.push(step(
        WORKSPACE,
        MountAction::Bind {
            source: workspace.to_path_buf(),
            read_only: false,
        },
        Reason::Workspace,
    ));
    for grant in grants {
        steps.push(step(
            format!("{WORKSPACE}/{grant}"),
            MountAction::Bind {
                source: workspace.join(grant),
                read_only: true,
            },
            Reason::ReadOnly,
        ));
    }
    MountPlan {
        root_size_bytes: 16 << 20,
        steps,
        workdir: WORKSPACE.into(),
        hostname: "spawn-bench".into(),
    }
}

/// A request running `/bin/true` in `plan` as uid/gid 1000 (host 100000), default
/// seccomp filter, stdio on `/dev/null`.
fn request(plan: MountPlan) -> SpawnRequest {
    let mut request = SpawnRequest::new(plan, vec![TRUE.into()]);
    request.uid = 1000;
    request.gid = 1000;
    request.host_uid = 100_000;
    request.host_gid = 100_000;
    request.env = vec![("PATH".into(), "/usr/bin:/bin".into())];
    request
}

/// The bwrap command line equivalent to [`plan`].
fn bwrap_command(
    system: &[(&str, Option<String>)],
    workspace: &Path,
    grants: &[String],
) -> Command {
    let mut command = bwrap::command(system, workspace);
    for grant in grants {
        command
            .arg("--ro-bind")
            .arg(workspace.join(grant))
            .arg(format!("{WORKSPACE}/{grant}"));
    }
    command.args(["--chdir", WORKSPACE, TRUE]);
    quiet(command)
}

fn unshare_command() -> Command {
    let mut command = Command::new("unshare");
    command.args([
        "--user",
        "--map-root-user",
        "--mount",
        "--pid",
        "--fork",
        "--net",
        "--uts",
        "--ipc",
        TRUE,
    ]);
    quiet(command)
}

fn quiet(mut command: Command) -> Command {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// Runs `command` once, untimed, with its stderr shown: `Ok` if it exits 0.
fn check(command: &mut Command) -> Result<(), String> {
    let out = command
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| e.to_string())?;
    command.stderr(Stdio::null());
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Times one `spawn` + `wait` of `request`.
fn time_spawn(request: &SpawnRequest) -> Duration {
    let started = Instant::now();
    let mut child = spawn(request).unwrap();
    let status = child.wait().unwrap();
    let elapsed = started.elapsed();
    assert_eq!(status, ExitStatusRecord::Code(0));
    elapsed
}

/// Times one run of `command`.
fn time_command(command: &mut Command) -> Duration {
    let started = Instant::now();
    let status = command.status().unwrap();
    let elapsed = started.elapsed();
    assert!(status.success(), "{command:?}: {status}");
    elapsed
}

fn group_config(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    measure: Duration,
) {
    group
        .sample_size(SAMPLES)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(measure);
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    let Some(full) = timings::full_run(&mut criterion) else {
        return;
    };
    let (small, large) = if full { (500, 2_000) } else { (20, 80) };

    // Mode 0755 (not a private temporary directory's 0700): the run's mapped ids
    // must be able to reach the workspace for the binds.
    let base = tempfile::Builder::new()
        .prefix("aw-spawn-bench-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let workspace: PathBuf = base.path().join("workspace");
    std::fs::create_dir(&workspace).unwrap();
    let grants: Vec<String> = (0..large).map(|i| format!("g{i:04}")).collect();
    for grant in &grants {
        std::fs::create_dir(workspace.join(grant)).unwrap();
        std::fs::write(workspace.join(grant).join("file"), "x").unwrap();
    }
    let system = host_system();

    println!("spawn bench: workspace {}", workspace.display());
    println!("  base system as on this host: {system:?}");
    let bwrap = match Command::new("bwrap").arg("--version").output() {
        Ok(out) if out.status.success() => {
            let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            match check(&mut bwrap_command(&system, &workspace, &[])) {
                Ok(()) => {
                    println!("  {version}");
                    true
                }
                Err(e) => {
                    println!("  {version} does not run here ({e}): bwrap rows SKIPPED");
                    false
                }
            }
        }
        _ => {
            println!(
                "  bwrap not found on PATH: bwrap rows SKIPPED (Debian: apt-get install bubblewrap)"
            );
            false
        }
    };
    let unshare = match check(&mut unshare_command()) {
        Ok(()) => true,
        Err(e) => {
            println!("  unshare does not run here ({e}): unshare row SKIPPED");
            false
        }
    };

    let base_request = request(plan(&system, &workspace, &[]));
    let small_request = request(plan(&system, &workspace, &grants[..small]));
    let large_request = request(plan(&system, &workspace, &grants));

    {
        let mut group = criterion.benchmark_group("true");
        group_config(&mut group, Duration::from_secs(5));
        group.bench_function("spawn", |b| {
            b.iter_custom(|iters| {
                let batch = (0..iters).map(|_| time_spawn(&base_request)).collect();
                record(SPAWN, batch)
            });
        });
        if bwrap {
            let mut command = bwrap_command(&system, &workspace, &[]);
            group.bench_function("bwrap", |b| {
                b.iter_custom(|iters| {
                    let batch = (0..iters).map(|_| time_command(&mut command)).collect();
                    record(BWRAP, batch)
                });
            });
        }
        if unshare {
            let mut command = unshare_command();
            group.bench_function("unshare", |b| {
                b.iter_custom(|iters| {
                    let batch = (0..iters).map(|_| time_command(&mut command)).collect();
                    record(UNSHARE, batch)
                });
            });
        }
        group.finish();
    }

    {
        let mut group = criterion.benchmark_group("grants");
        group_config(&mut group, Duration::from_secs(6));
        for (id, name, request) in [
            (format!("spawn_{small}"), SPAWN_SMALL, &small_request),
            (format!("spawn_{large}"), SPAWN_LARGE, &large_request),
        ] {
            group.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    let batch = (0..iters).map(|_| time_spawn(request)).collect();
                    record(name, batch)
                });
            });
        }
        if bwrap {
            for (id, name, count) in [
                (format!("bwrap_{small}"), BWRAP_SMALL, small),
                (format!("bwrap_{large}"), BWRAP_LARGE, large),
            ] {
                let mut command = bwrap_command(&system, &workspace, &grants[..count]);
                group.bench_function(id, |b| {
                    b.iter_custom(|iters| {
                        let batch = (0..iters).map(|_| time_command(&mut command)).collect();
                        record(name, batch)
                    });
                });
            }
        }
        group.finish();
    }
    criterion.final_summary();

    print_table(full, small, large, bwrap);
}

fn print_table(full: bool, small: usize, large: usize, bwrap: bool) {
    let label = |name: &str| match name {
        SPAWN_SMALL => format!("spawn + {small} ro binds"),
        SPAWN_LARGE => format!("spawn + {large} ro binds"),
        BWRAP_SMALL => format!("bwrap + {small} ro binds"),
        BWRAP_LARGE => format!("bwrap + {large} ro binds"),
        other => other.to_owned(),
    };
    println!();
    println!("== spawn: /bin/true isolated, medians measured in this run (warm-up excluded) ==");
    let names = [
        SPAWN,
        BWRAP,
        UNSHARE,
        SPAWN_SMALL,
        SPAWN_LARGE,
        BWRAP_SMALL,
        BWRAP_LARGE,
    ];
    let rows: Vec<_> = names.iter().map(|n| (*n, label(n))).collect();
    let medians = print_medians(&rows, 28, |name| {
        if !bwrap && name.starts_with("bwrap") {
            "SKIPPED: bwrap absent or unusable"
        } else {
            "not run"
        }
    });

    println!();
    println!("== ratios of medians ==");
    let linear = (large as f64) / (small as f64);
    let ratios = [
        ("spawn / bwrap".to_owned(), SPAWN, BWRAP, Some(1.0)),
        ("spawn / unshare".to_owned(), SPAWN, UNSHARE, None),
        (
            format!("spawn {large} / spawn {small} binds"),
            SPAWN_LARGE,
            SPAWN_SMALL,
            None,
        ),
        (
            format!("bwrap {large} / bwrap {small} binds"),
            BWRAP_LARGE,
            BWRAP_SMALL,
            None,
        ),
        (
            format!("spawn {large} / bwrap {large} binds"),
            SPAWN_LARGE,
            BWRAP_LARGE,
            Some(1.0),
        ),
    ];
    for (label, num, den, goal) in ratios {
        let (Some(a), Some(b)) = (medians.get(num), medians.get(den)) else {
            println!("{label:<32} (not measured)");
            continue;
        };
        let ratio = a.as_secs_f64() / b.as_secs_f64();
        let verdict = match goal.filter(|_| full) {
            Some(g) if ratio <= g => format!("goal <= {g}: met"),
            Some(g) => format!("goal <= {g}: NOT met"),
            None if den == SPAWN_SMALL || den == BWRAP_SMALL => {
                format!("(linear: <= {linear:.0}, lower by the fixed cost; above: superlinear)")
            }
            None => String::new(),
        };
        println!("{label:<32} {ratio:>9.3}   {verdict}");
    }
    // Slope: the marginal cost of one grant, from the two sizes.
    for (tool, s, l) in [
        ("spawn", SPAWN_SMALL, SPAWN_LARGE),
        ("bwrap", BWRAP_SMALL, BWRAP_LARGE),
    ] {
        if let (Some(a), Some(b)) = (medians.get(s), medians.get(l)) {
            let per = (b.as_secs_f64() - a.as_secs_f64()) / (large - small) as f64;
            println!("{tool}: {:.1} µs per extra read-only bind", per * 1e6);
        }
    }
    if !full {
        println!(
            "(test mode: {small}/{large} grants, one iteration each; run `cargo bench --bench spawn` for figures)"
        );
    }
}

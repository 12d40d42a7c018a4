//! Provisioning a fresh workspace, side by side in one run: `git worktree add`,
//! `git clone --shared` + checkout, our standalone checkout, our layered
//! materialization with a warm base-tree cache (on a repository and on one ten times
//! larger), and the diff of one changed file (layered upper directory against a
//! standalone checkout's full walk).
//!
//! Run with `cargo bench --bench provision`. It generates a repository of 5,000 files
//! (about 50 MB, 200 directories) and one of 50,000 files (about 500 MB, 2,000
//! directories) under one temporary directory, and prints, after criterion's report, a
//! table of medians and ratios measured in this same run. Every provisioning iteration
//! writes to a fresh path; old iterations are kept until the end (never deleted in
//! between: deletions make later disk writes slow and noisy) and `sync` runs before
//! each criterion sample, outside the timed region.
//!
//! `cargo test --benches` runs every benchmark once on small repositories.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: failing loudly is right

mod support;

mod timings;

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use agent_workspace::worktree::changes::ChangeOptions;
use agent_workspace::worktree::layered::cache::TreeCache;
use agent_workspace::worktree::layered::diff::export_layered_patch;
use agent_workspace::worktree::layered::provision::{LayeredCheckout, provision_layered};
use agent_workspace::worktree::promotion::export_patch;
use agent_workspace::worktree::source::provision_standalone;
use criterion::{Criterion, SamplingMode};
use support::GeneratedRepo;
use timings::{SAMPLES, ms, print_medians, record};

const WORKTREE: &str = "git worktree add --detach (5k)";
const CLONE: &str = "git clone --shared + checkout (5k)";
const STANDALONE: &str = "standalone checkout (5k)";
const LAYERED: &str = "layered, warm cache (5k)";
const LAYERED_10X: &str = "layered, warm cache (10x)";
const DIFF_LAYERED: &str = "diff of 1 file, layered (5k)";
const DIFF_LAYERED_10X: &str = "diff of 1 file, layered (10x)";
const DIFF_STANDALONE: &str = "diff of 1 file, standalone (5k)";

/// The sizes of the two generated repositories.
#[derive(Clone, Copy, Debug)]
struct Scale {
    files: usize,
    dirs: usize,
    bytes_per_file: usize,
}

impl Scale {
    fn describe(&self) -> String {
        format!(
            "{} files, {} directories, {:.0} MB",
            self.files,
            self.dirs,
            (self.files * self.bytes_per_file) as f64 / 1e6
        )
    }
}

/// Where every path of the run lives, and fresh names under it.
struct Fixture {
    root: tempfile::TempDir,
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
}

/// Flushes dirty pages so that no sample pays for an earlier one's writeback.
fn settle() {
    let _ = Command::new("sync").status();
}

/// Bytes available on the file system holding `path`, from `df`.
fn available_bytes(path: &Path) -> Option<u64> {
    let out = Command::new("df").arg("-Pk").arg(path).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let kib: u64 = text
        .lines()
        .nth(1)?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// `df -PTh` of `path`: which device and file system the run writes to.
fn describe_fs(path: &Path) -> String {
    Command::new("df")
        .arg("-PTh")
        .arg(path)
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.lines().nth(1).map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    let Some(full) = timings::full_run(&mut criterion) else {
        return;
    };

    // Full run: up to about 6 GB (repositories, the cache, every kept iteration).
    let need = if full { 8 << 30 } else { 256 << 20 };
    let temp = std::env::temp_dir();
    let parent = if available_bytes(&temp).is_some_and(|a| a >= need) {
        temp
    } else {
        let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-tmp");
        std::fs::create_dir_all(&local).unwrap();
        local
    };
    let fixture = Fixture {
        root: tempfile::Builder::new()
            .prefix("aw-bench-")
            .tempdir_in(&parent)
            .unwrap(),
        next: Cell::new(0),
    };
    let small = Scale {
        files: if full { 5_000 } else { 200 },
        dirs: if full { 200 } else { 20 },
        bytes_per_file: if full { 10_000 } else { 1_000 },
    };
    // Ten times the files. If the disk cannot hold ~500 MB twice over, keep ten times
    // the files with proportionally smaller ones (the claim is about file count).
    let roomy = available_bytes(fixture.root.path()).is_some_and(|a| a >= need);
    let large = Scale {
        files: small.files * 10,
        dirs: small.dirs * 10,
        bytes_per_file: if roomy {
            small.bytes_per_file
        } else {
            small.bytes_per_file / 10
        },
    };
    println!(
        "provision bench: temporary files under {}",
        fixture.root.path().display()
    );
    println!("  file system: {}", describe_fs(fixture.root.path()));
    println!("  repository:     {}", small.describe());
    println!(
        "  10x repository: {}{}",
        large.describe(),
        if roomy {
            ""
        } else {
            " (smaller files: not enough disk for 10x bytes)"
        }
    );

    let started = Instant::now();
    let repos = fixture.root.path().join("repos");
    std::fs::create_dir_all(&repos).unwrap();
    let repo = support::generate(&repos, small.files, small.dirs, small.bytes_per_file);
    let generated_small = started.elapsed();
    let started = Instant::now();
    let repo_10x = support::generate(&repos, large.files, large.dirs, large.bytes_per_file);
    let generated_large = started.elapsed();
    println!(
        "  generated in {:.1} s and {:.1} s",
        generated_small.as_secs_f64(),
        generated_large.as_secs_f64()
    );

    // The warm cache: each base tree populated once, before any timing.
    let cache = TreeCache::open(fixture.root.path().join("cache"), u64::MAX).unwrap();
    let (cold, diff_run) = populate(&fixture, &cache, &repo);
    let (cold_10x, diff_run_10x) = populate(&fixture, &cache, &repo_10x);
    println!(
        "  cold layered (populating the cache, once): {:.0} ms and {:.0} ms",
        ms(cold),
        ms(cold_10x)
    );

    for run in [&diff_run, &diff_run_10x] {
        let index = std::fs::metadata(run.lower.join(".git/index"))
            .unwrap()
            .len();
        println!(
            "  base index ({}): {:.1} MB",
            run.base.meta().files,
            index as f64 / 1e6
        );
    }

    bench_provision(&mut criterion, &fixture, &cache, [&repo, &repo_10x]);
    bench_diff(
        &mut criterion,
        &fixture,
        &repo,
        &repo_10x,
        &diff_run,
        &diff_run_10x,
    );
    criterion.final_summary();
    drop((diff_run, diff_run_10x));

    print_table(full);
    println!("(removing {} ...)", fixture.root.path().display());
}

/// Populates the cache with `repo`'s tree (timed: the cold layered cost) and returns a
/// run of it with one file changed in its upper directory.
fn populate(
    fixture: &Fixture,
    cache: &TreeCache,
    repo: &GeneratedRepo,
) -> (Duration, LayeredCheckout) {
    let started = Instant::now();
    let run = provision_layered(
        cache,
        &repo.path,
        &repo.commit,
        &fixture.fresh("layered-diff"),
    )
    .unwrap();
    let cold = started.elapsed();
    change_one_file(&run.lower, &run.upper);
    (cold, run)
}

/// Writes `d000/f00000.txt` of `base` with a line appended into `dest` (for a layered
/// run, what overlayfs's copy-up would leave in the upper directory).
fn change_one_file(base: &Path, dest: &Path) {
    let relative = Path::new("d000/f00000.txt");
    let mut content = std::fs::read(base.join(relative)).unwrap();
    content.extend_from_slice(b"one more line\n");
    std::fs::create_dir_all(dest.join("d000")).unwrap();
    std::fs::write(dest.join(relative), content).unwrap();
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

fn bench_provision(
    c: &mut Criterion,
    fixture: &Fixture,
    cache: &TreeCache,
    [repo, repo_10x]: [&GeneratedRepo; 2],
) {
    let mut group = c.benchmark_group("provision");
    group_config(&mut group, Duration::from_secs(6));

    group.bench_function("git_worktree_add", |b| {
        b.iter_custom(|iters| {
            settle();
            let mut batch = Vec::new();
            for _ in 0..iters {
                let dest = fixture.fresh("worktree");
                let started = Instant::now();
                support::git_worktree_add(repo, &dest);
                batch.push(started.elapsed());
                // Outside the timed region: unregister the worktree. Its files are moved
                // aside (one rename) and kept until the end rather than deleted.
                std::fs::rename(&dest, fixture.fresh("trash")).unwrap();
                support::run(support::git(&repo.path).args(["worktree", "prune"]));
            }
            record(WORKTREE, batch)
        });
    });

    group.bench_function("git_clone_shared", |b| {
        b.iter_custom(|iters| {
            settle();
            let mut batch = Vec::new();
            for _ in 0..iters {
                let dest = fixture.fresh("clone");
                let started = Instant::now();
                support::git_clone_shared(repo, &dest);
                batch.push(started.elapsed());
            }
            record(CLONE, batch)
        });
    });

    group.bench_function("standalone", |b| {
        b.iter_custom(|iters| {
            settle();
            let mut batch = Vec::new();
            for _ in 0..iters {
                let dest = fixture.fresh("standalone");
                let started = Instant::now();
                provision_standalone(&repo.path, &repo.commit, &dest).unwrap();
                batch.push(started.elapsed());
            }
            record(STANDALONE, batch)
        });
    });

    // Writes only the run's `.git`: many iterations per sample, so a shorter target.
    group.measurement_time(Duration::from_secs(2));
    for (id, name, source) in [
        ("layered_warm", LAYERED, repo),
        ("layered_warm_10x", LAYERED_10X, repo_10x),
    ] {
        group.bench_function(id, |b| {
            b.iter_custom(|iters| {
                settle();
                let mut batch = Vec::new();
                let mut runs = Vec::new();
                for _ in 0..iters {
                    let run_dir = fixture.fresh("layered");
                    let started = Instant::now();
                    let run =
                        provision_layered(cache, &source.path, &source.commit, &run_dir).unwrap();
                    batch.push(started.elapsed());
                    runs.push(run);
                }
                drop(runs); // releases the cache holds, untimed
                record(name, batch)
            });
        });
    }
    group.finish();
}

fn bench_diff(
    c: &mut Criterion,
    fixture: &Fixture,
    repo: &GeneratedRepo,
    repo_10x: &GeneratedRepo,
    run: &LayeredCheckout,
    run_10x: &LayeredCheckout,
) {
    let outputs = vec![".".to_owned()];
    let options = ChangeOptions::default();

    // The standalone checkout to compare with, one file changed the same way.
    let standalone = fixture.fresh("standalone-diff");
    provision_standalone(&repo.path, &repo.commit, &standalone).unwrap();
    change_one_file(&standalone, &standalone);

    // All three must see exactly the one change, and agree on the patch.
    let layered_patch =
        export_layered_patch(&repo.path, &repo.commit, &run.upper, &outputs, &options).unwrap();
    let standalone_patch =
        export_patch(&repo.path, &repo.commit, &standalone, &outputs, &options).unwrap();
    let layered_10x_patch = export_layered_patch(
        &repo_10x.path,
        &repo_10x.commit,
        &run_10x.upper,
        &outputs,
        &options,
    )
    .unwrap();
    assert_eq!(
        layered_patch.changes.len(),
        1,
        "{:?}",
        layered_patch.changes
    );
    assert_eq!(
        layered_10x_patch.changes.len(),
        1,
        "{:?}",
        layered_10x_patch.changes
    );
    assert_eq!(layered_patch.patch_sha256, standalone_patch.patch_sha256);

    let mut group = c.benchmark_group("diff_one_file");
    group_config(&mut group, Duration::from_secs(2));
    for (id, name, source, upper) in [
        ("layered", DIFF_LAYERED, repo, &run.upper),
        ("layered_10x", DIFF_LAYERED_10X, repo_10x, &run_10x.upper),
    ] {
        group.bench_function(id, |b| {
            b.iter_custom(|iters| {
                let mut batch = Vec::new();
                for _ in 0..iters {
                    let started = Instant::now();
                    let export = export_layered_patch(
                        &source.path,
                        &source.commit,
                        upper,
                        &outputs,
                        &options,
                    )
                    .unwrap();
                    batch.push(started.elapsed());
                    std::hint::black_box(export);
                }
                record(name, batch)
            });
        });
    }
    group.measurement_time(Duration::from_secs(4));
    group.bench_function("standalone", |b| {
        b.iter_custom(|iters| {
            let mut batch = Vec::new();
            for _ in 0..iters {
                let started = Instant::now();
                let export =
                    export_patch(&repo.path, &repo.commit, &standalone, &outputs, &options)
                        .unwrap();
                batch.push(started.elapsed());
                std::hint::black_box(export);
            }
            record(DIFF_STANDALONE, batch)
        });
    });
    group.finish();
}

fn print_table(full: bool) {
    println!();
    println!("== provision: medians measured in this run (warm-up excluded) ==");
    let names = [
        WORKTREE,
        CLONE,
        STANDALONE,
        LAYERED,
        LAYERED_10X,
        DIFF_LAYERED,
        DIFF_LAYERED_10X,
        DIFF_STANDALONE,
    ];
    let rows: Vec<_> = names.iter().map(|n| (*n, (*n).to_owned())).collect();
    let medians = print_medians(&rows, 40, |_| "not run");

    println!();
    println!("== ratios of medians ==");
    let ratios: [(&str, &str, &str, Option<f64>); 6] = [
        (
            "standalone / git worktree add",
            STANDALONE,
            WORKTREE,
            Some(1.0),
        ),
        ("clone --shared / git worktree add", CLONE, WORKTREE, None),
        (
            "layered warm / git worktree add",
            LAYERED,
            WORKTREE,
            Some(0.1),
        ),
        (
            "layered warm 10x / layered warm 5k",
            LAYERED_10X,
            LAYERED,
            Some(2.0),
        ),
        (
            "diff layered 10x / diff layered 5k",
            DIFF_LAYERED_10X,
            DIFF_LAYERED,
            None,
        ),
        (
            "diff layered 5k / diff standalone 5k",
            DIFF_LAYERED,
            DIFF_STANDALONE,
            None,
        ),
    ];
    for (label, num, den, goal) in ratios {
        let (Some(a), Some(b)) = (medians.get(num), medians.get(den)) else {
            println!("{label:<40} (not run)");
            continue;
        };
        let ratio = a.as_secs_f64() / b.as_secs_f64();
        let verdict = match goal.filter(|_| full) {
            Some(g) if ratio <= g => format!("goal <= {g}: met"),
            Some(g) => format!("goal <= {g}: NOT met"),
            None => String::new(),
        };
        println!("{label:<40} {ratio:>9.3}   {verdict}");
    }
    if !full {
        println!(
            "(test mode: small repositories, one iteration each; run `cargo bench --bench provision` for figures)"
        );
    }
}

//! Many runs through one [`Runner`] on the default namespace stack, admitted by a
//! [`Capacity`] that lets only a few hold at once (run as root: real namespaces
//! and cgroups).
//!
//! All runs are started at once; a sampler task watches the capacity pool the
//! whole time. Each run writes a line unique to it into its workspace, so the
//! evidence shows whose workspace each patch came from. Afterwards nothing of any
//! run may be left: no checkout, no cgroup, no mount, no process.
//!
//! No collision of names or ports either: every contract declares a cache prefix
//! stem, a schema stem and one port. Each run records the cache prefix and schema
//! name it was leased, and when its command started and ended; any two runs whose
//! commands overlapped in time must hold different names (a name freed at cleanup
//! may be leased again later). The port is not leased on the host, as each run has
//! a network of its own: every command listens on that very port (held by the test
//! on the host meanwhile) and connects to itself, with `perl` (Debian's essential
//! `perl-base`), so overlapping runs listen on the same port at once.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod support;

use std::collections::HashSet;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agent_workspace::core::boundary::{CommandSpec, SourceRecord};
use agent_workspace::core::capacity::{Capacity, Resources};
use agent_workspace::core::contract::{ByteSize, Contract, SourceSection, TaskShape};
use agent_workspace::core::evidence::{EvidenceFile, verify};
use agent_workspace::core::lease::Leases;
use agent_workspace::core::runner::{CommandIo, CreateOptions, RunReport, Runner, RunnerConfig};
use agent_workspace::namespace::cgroup::{CgroupLayout, remove_parent};
use support::command_lines_with;

/// How many runs are started at once.
const RUNS: usize = 200;
/// How many the capacity admits at a time.
const SLOTS: u32 = 8;
/// Each run's limits, which are what it reserves.
const RUN_CPU_MILLIS: u64 = 250;
const RUN_MEMORY: u64 = 256 << 20;
/// Generous: a deadlock fails the test instead of hanging it.
const OUTER_TIMEOUT: Duration = Duration::from_secs(600);
/// The stems every contract declares; runs get `cache-<n>` and `app_<n>`.
const CACHE_STEM: &str = "cache";
const SCHEMA_STEM: &str = "app";
/// How long each command listens on the port (seconds): long enough that the
/// commands of runs admitted at once overlap.
const LISTEN_SECONDS: &str = "0.2";

/// Each run's command. `$0` is the run's name, `$1` the port, `$2` how long to
/// listen. The first marker line is `<name> <pid>`, the second
/// `names <cache prefix> <schema> <port check> <start ns> <end ns>`.
const SCRIPT: &str = r#"start=$(date +%s%N)
port=$(perl -MIO::Socket::INET -e '
my ($port, $hold) = @ARGV;
my $server = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => $port,
    Proto => "tcp", Listen => 5) or die "cannot listen on port $port: $@\n";
my $client = IO::Socket::INET->new(PeerAddr => "127.0.0.1", PeerPort => $port,
    Proto => "tcp") or die "cannot connect to port $port: $@\n";
$server->accept or die "cannot accept on port $port: $!\n";
select(undef, undef, undef, $hold);
print "listened-$port";
' "$1" "$2") || exit 1
end=$(date +%s%N)
echo "$0 $$" > marker
echo "names $AGENT_WORKSPACE_CACHE_PREFIX $AGENT_WORKSPACE_DB_SCHEMA $port $start $end" >> marker
"#;

/// Removes the test's parent cgroups when dropped (also when the test panics).
struct ParentGuard(String);

impl Drop for ParentGuard {
    fn drop(&mut self) {
        if let Ok(layout) = CgroupLayout::detect()
            && let Err(e) = remove_parent(&layout, &self.0)
        {
            eprintln!("removing the test parent cgroup {} failed: {e}", self.0);
        }
    }
}

/// A temporary directory every id can search (runs are mapped to unprivileged
/// host ids, and the checkout is mounted into them from the runtime directory).
fn open_tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// `git` with no host or user configuration.
fn git(dir: &Path) -> Command {
    let mut command = Command::new("git");
    command
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(["-c", "user.name=test", "-c", "user.email=test@localhost"]);
    command
}

fn run_git(command: &mut Command) {
    let out = command.output().expect("run git (install git)");
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A one-commit repository at `<parent>/source`.
fn make_repo(parent: &Path) -> PathBuf {
    let repo = parent.join("source");
    std::fs::create_dir(&repo).unwrap();
    std::fs::write(repo.join("README"), "a tiny repository\n").unwrap();
    run_git(git(&repo).args(["init", "-q", "-b", "main"]));
    run_git(git(&repo).args(["add", "README"]));
    run_git(git(&repo).args(["commit", "-q", "-m", "initial"]));
    repo
}

/// Mount points of every cgroup hierarchy (v1 and v2) of this host.
fn cgroup_mounts() -> Vec<PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fstype = right.split_whitespace().next()?;
            let mount_point = left.split_whitespace().nth(4)?;
            matches!(fstype, "cgroup" | "cgroup2").then(|| PathBuf::from(mount_point))
        })
        .collect()
}

/// Directories under `<hierarchy>/<parent>` in any hierarchy: a run's cgroup
/// that was not removed.
fn cgroups_left_under(parent: &str) -> Vec<PathBuf> {
    let mut left = Vec::new();
    for mount in cgroup_mounts() {
        let Ok(entries) = std::fs::read_dir(mount.join(parent)) else {
            continue;
        };
        for entry in entries {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                left.push(entry.path());
            }
        }
    }
    left
}

/// Mount points at or under `dir` in this process's mount table.
fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = dir.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|line| line.split_whitespace().nth(4).map(str::to_owned))
        .filter(|mount_point| mount_point.starts_with(&prefix))
        .collect()
}

/// What the sampler saw of the pool.
#[derive(Debug, Default)]
struct Observed {
    samples: usize,
    max_holders: usize,
    max_waiters: usize,
    violations: Vec<String>,
}

/// Samples `capacity` until `stop`, checking every snapshot against its total.
async fn sample(capacity: Arc<Capacity>, stop: Arc<AtomicBool>) -> Observed {
    let total = capacity.total();
    let mut observed = Observed::default();
    while !stop.load(Ordering::Acquire) {
        let snapshot = capacity.snapshot();
        observed.samples += 1;
        let summed = snapshot
            .holders
            .iter()
            .fold(Resources::ZERO, |sum, h| sum.saturating_add(&h.resources));
        let mut problems = Vec::new();
        if snapshot.holders.len() > SLOTS as usize {
            problems.push(format!("{} holders", snapshot.holders.len()));
        }
        if !summed.fits(&total) {
            problems.push(format!("holders sum to {summed:?}, total {total:?}"));
        }
        if summed != snapshot.in_use {
            problems.push(format!(
                "holders sum to {summed:?}, in_use says {:?}",
                snapshot.in_use
            ));
        }
        if snapshot.total != total {
            problems.push(format!("total changed to {:?}", snapshot.total));
        }
        if !problems.is_empty() && observed.violations.len() < 10 {
            observed.violations.push(format!(
                "sample {}: {}",
                observed.samples,
                problems.join("; ")
            ));
        }
        observed.max_holders = observed.max_holders.max(snapshot.holders.len());
        observed.max_waiters = observed.max_waiters.max(snapshot.waiters.len());
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    observed
}

/// The contract every run gets: a narrow fix of `repo` with small limits.
fn small_contract(repo: &Path) -> Contract {
    let mut contract = Contract::preset(
        TaskShape::NarrowFix,
        "runner capacity test",
        SourceSection::new(repo.to_string_lossy(), "HEAD"),
    );
    contract.environment.limits.cpus = Some(RUN_CPU_MILLIS as f64 / 1000.0);
    contract.environment.limits.memory = Some(ByteSize(RUN_MEMORY));
    contract
}

/// What one run's command saw: its leased names and when it ran (host realtime).
#[derive(Debug)]
struct Seen {
    index: usize,
    cache_prefix: String,
    schema: String,
    start_ns: u128,
    end_ns: u128,
}

impl Seen {
    /// Whether the two commands ran at some instant at once.
    fn overlaps(&self, other: &Self) -> bool {
        self.start_ns <= other.end_ns && other.start_ns <= self.end_ns
    }
}

/// Whether `name` is `<stem><separator><n>` with `n` a positive number.
fn is_leased_form(name: &str, stem: &str, separator: char) -> bool {
    name.strip_prefix(stem)
        .and_then(|rest| rest.strip_prefix(separator))
        .and_then(|n| n.parse::<u32>().ok())
        .is_some_and(|n| n >= 1)
}

/// Fails with what to install when the command's listener cannot run.
fn require_perl_sockets() {
    let out = Command::new("perl")
        .args(["-MIO::Socket::INET", "-e", "1"])
        .output();
    assert!(
        out.as_ref().is_ok_and(|o| o.status.success()),
        "each run listens on a port with perl's IO::Socket::INET; install perl-base: {out:?}"
    );
}

/// Checks one run's report and evidence; returns its checkout path from
/// `source.json` and what its command saw.
fn check_run(report: &RunReport, tag: &str, index: usize, port: u16) -> (PathBuf, Seen) {
    let id = &report.run_id;
    assert_eq!(report.outcome.failure, None, "{id}: {report:?}");
    assert_eq!(report.outcome.commands.len(), 1, "{id}: {report:?}");
    assert!(
        report.outcome.commands[0].succeeded(),
        "{id}: {:?}",
        report.outcome.commands[0]
    );
    assert!(
        report.outcome.leaks.as_ref().is_some_and(|l| l.is_clean()),
        "{id}: {:?}",
        report.outcome.leaks
    );
    assert!(report.outcome.errors.is_empty(), "{id}: {report:?}");
    assert!(report.cleaned, "{id}: {:?}", report.cleanup_errors);
    assert!(report.evidence_sealed, "{id}");

    let verified = verify(&report.evidence).unwrap();
    assert!(verified.is_intact(), "{id}: {:?}", verified.problems);

    let patch =
        std::fs::read_to_string(report.evidence.join(EvidenceFile::Diff.file_name())).unwrap();
    assert!(patch.contains("+++ b/marker"), "{id}: {patch}");
    let line = patch
        .lines()
        .find(|l| l.starts_with(&format!("+{tag}-")))
        .unwrap_or_else(|| panic!("{id}: no marker line in {patch}"));
    // `+<tag>-<index> <pid>`: the run wrote its own index, nobody else's.
    let (name, pid) = line[1..].split_once(' ').unwrap();
    assert_eq!(name, format!("{tag}-{index}"), "{id}: {patch}");
    assert!(pid.parse::<u32>().is_ok(), "{id}: {line}");

    // `+names <cache prefix> <schema> listened-<port> <start> <end>`.
    let names = patch
        .lines()
        .find_map(|l| l.strip_prefix("+names "))
        .unwrap_or_else(|| panic!("{id}: no names line in {patch}"));
    let fields: Vec<&str> = names.split(' ').collect();
    let [cache_prefix, schema, listened, start, end] = fields[..] else {
        panic!("{id}: a name is missing: {names:?}");
    };
    assert!(
        is_leased_form(cache_prefix, CACHE_STEM, '-'),
        "{id}: cache prefix {cache_prefix:?}"
    );
    assert!(
        is_leased_form(schema, SCHEMA_STEM, '_'),
        "{id}: schema {schema:?}"
    );
    assert_eq!(listened, format!("listened-{port}"), "{id}: {names}");
    let start_ns: u128 = start.parse().unwrap();
    let end_ns: u128 = end.parse().unwrap();
    assert!(start_ns <= end_ns, "{id}: {names}");
    // Exactly the two names, as the run saw them; no host port (its own network).
    assert_eq!(
        report.outcome.leases,
        [
            format!("cache prefix {cache_prefix}"),
            format!("schema {schema}")
        ],
        "{id}"
    );

    let source: SourceRecord = serde_json::from_slice(
        &std::fs::read(report.evidence.join(EvidenceFile::Source.file_name())).unwrap(),
    )
    .unwrap();
    let seen = Seen {
        index,
        cache_prefix: cache_prefix.to_owned(),
        schema: schema.to_owned(),
        start_ns,
        end_ns,
    };
    (source.workspace, seen)
}

/// Checks that no two runs whose commands overlapped held the same name; returns
/// how many pairs overlapped and the most commands that ran at once.
fn check_no_name_collision(seen: &[Seen]) -> (usize, usize) {
    let mut overlapping = 0;
    let mut most_at_once = 0;
    for (i, a) in seen.iter().enumerate() {
        let mut at_once = 1;
        for b in &seen[i + 1..] {
            if !a.overlaps(b) {
                continue;
            }
            overlapping += 1;
            assert_ne!(
                a.cache_prefix, b.cache_prefix,
                "runs {} and {} ran at once with one cache prefix: {a:?} {b:?}",
                a.index, b.index
            );
            assert_ne!(
                a.schema, b.schema,
                "runs {} and {} ran at once with one schema: {a:?} {b:?}",
                a.index, b.index
            );
        }
        // Commands running at `a`'s start: the most at once is reached at some start.
        for b in seen {
            if b.index != a.index && b.start_ns <= a.start_ns && a.start_ns <= b.end_ns {
                at_once += 1;
            }
        }
        most_at_once = most_at_once.max(at_once);
    }
    (overlapping, most_at_once)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_runs_share_eight_slots_without_collision_or_leak() {
    require_perl_sockets();
    let started = Instant::now();
    let pid = std::process::id();
    let parent = format!("aw-cap-{pid}");
    let _guard = ParentGuard(parent.clone());
    // In every run's command line, so a surviving process of this test is found.
    let tag = format!("aw-cap-marker-{pid}");

    let base = open_tempdir();
    let repo = make_repo(base.path());
    let runtime = base.path().join("runtime");
    let evidence_root = base.path().join("evidence");

    // Totals sized so the slots bind: cpu and memory would admit one more run.
    let capacity = Arc::new(Capacity::new(Resources {
        cpu_millis: RUN_CPU_MILLIS * (u64::from(SLOTS) + 1),
        memory_bytes: RUN_MEMORY * (u64::from(SLOTS) + 1),
        disk_bytes: 0, // the preset declares no disk cap, so runs reserve none
        slots: SLOTS,
    }));
    let stack = agent_workspace::namespace_stack(&parent).unwrap();
    let runner = Runner::new(
        stack,
        RunnerConfig::new(&runtime, &evidence_root),
        capacity.clone(),
    );

    let stop = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn(sample(capacity.clone(), stop.clone()));

    // Held on the host while the runs listen on the same port in their networks.
    let host_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host_listener.local_addr().unwrap().port();

    let mut contract = small_contract(&repo);
    contract.process.cache_prefix = Some(CACHE_STEM.into());
    contract.process.database_schema = Some(SCHEMA_STEM.into());
    contract.process.ports = vec![port];
    let mut tasks = Vec::with_capacity(RUNS);
    for index in 0..RUNS {
        let runner = runner.clone();
        let contract = contract.clone();
        // `$0` is the run's name: it lands in the workspace and in the command line.
        let command = CommandSpec {
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                SCRIPT.into(),
                format!("{tag}-{index}"),
                port.to_string(),
                LISTEN_SECONDS.into(),
            ],
            cwd: ".".into(),
            ..CommandSpec::default()
        };
        tasks.push(tokio::spawn(async move {
            runner
                .run(
                    contract,
                    &command,
                    CommandIo::captured(),
                    CreateOptions::default(),
                )
                .await
        }));
    }

    let all = async {
        let mut reports = Vec::with_capacity(RUNS);
        for task in tasks {
            reports.push(task.await.unwrap().unwrap());
        }
        reports
    };
    let reports = tokio::time::timeout(OUTER_TIMEOUT, all)
        .await
        .expect("the runs did not finish in time");
    let runs_took = started.elapsed();
    stop.store(true, Ordering::Release);
    let observed = sampler.await.unwrap();

    // (a) The pool was never over its totals, and it was full at some point.
    assert!(observed.violations.is_empty(), "{:?}", observed.violations);
    assert_eq!(
        observed.max_holders, SLOTS as usize,
        "the runs never filled the slots: {observed:?}"
    );
    let after = capacity.snapshot();
    assert!(
        after.holders.is_empty() && after.waiters.is_empty(),
        "{after:?}"
    );
    assert_eq!(after.in_use, Resources::ZERO);

    // (b) No two runs shared an id, an evidence directory or a checkout.
    // (c) Every run succeeded, and its evidence is intact and its own.
    let mut run_ids = HashSet::new();
    let mut evidence_dirs = HashSet::new();
    let mut workspaces = HashSet::new();
    let mut seen = Vec::with_capacity(RUNS);
    for (index, report) in reports.iter().enumerate() {
        let (workspace, run_seen) = check_run(report, &tag, index, port);
        seen.push(run_seen);
        assert!(
            run_ids.insert(report.run_id.clone()),
            "run id {} twice",
            report.run_id
        );
        assert!(
            evidence_dirs.insert(report.evidence.clone()),
            "evidence {} twice",
            report.evidence.display()
        );
        assert!(
            workspaces.insert(workspace.clone()),
            "workspace {} twice",
            workspace.display()
        );
    }
    assert_eq!(workspaces.len(), RUNS);

    // (e) No two runs at once shared a cache prefix or a schema name; the port
    // every run listened on was held on the host all along.
    let (overlapping, most_at_once) = check_no_name_collision(&seen);
    // The control: the commands did run at once, so the check above had teeth.
    assert!(
        overlapping >= RUNS,
        "only {overlapping} pairs of commands overlapped"
    );
    assert!(
        most_at_once >= 2 && most_at_once <= SLOTS as usize,
        "{most_at_once} commands at once"
    );
    assert_eq!(host_listener.local_addr().unwrap().port(), port);
    drop(host_listener);
    let leases = Leases::open(&runtime, 1..=u16::MAX).unwrap();
    let held = leases.holders().unwrap();
    assert!(held.is_empty(), "leases outlive their runs: {held:?}");
    let distinct_prefixes: HashSet<_> = seen.iter().map(|s| &s.cache_prefix).collect();
    let distinct_schemas: HashSet<_> = seen.iter().map(|s| &s.schema).collect();

    // (d) Nothing of any run is left.
    let runs_dir = runtime.join(agent_workspace::core::runner::RUNS_DIR);
    let left: Vec<_> = std::fs::read_dir(&runs_dir)
        .map(|entries| entries.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "run directories left: {left:?}");
    assert_eq!(mounts_under(&runtime), Vec::<String>::new());
    assert_eq!(cgroups_left_under(&parent), Vec::<PathBuf>::new());
    assert_eq!(command_lines_with(&tag), Vec::<(u32, String)>::new());
    let layout = CgroupLayout::detect().unwrap();
    remove_parent(&layout, &parent).unwrap();
    for mount in cgroup_mounts() {
        assert!(!mount.join(&parent).exists(), "{}", mount.display());
    }

    drop(base); // 200 evidence bundles and journals: seconds on a loaded machine
    eprintln!(
        "{RUNS} runs, {SLOTS} slots: {:.1} s for the runs, {:.1} s in all; \
         max holders {}, max waiters {}, {} samples; {overlapping} overlapping \
         command pairs checked, at most {most_at_once} commands at once, \
         {} cache prefixes and {} schemas in use over all runs",
        runs_took.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        observed.max_holders,
        observed.max_waiters,
        observed.samples,
        distinct_prefixes.len(),
        distinct_schemas.len(),
    );
}

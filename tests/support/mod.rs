//! Fixtures shared by the runner tests: a real git repository, runtime and
//! evidence directories the run's mapped ids can reach, a cgroup parent of the
//! test's own, and the checks that a run left nothing behind. The crash-recovery
//! tests add [`gates`] (boundaries that hold a run at one point), [`crash`] (the
//! states a run is lost in, and the parent's side) and [`crash_child`] (the runner
//! they kill). The CLI tests use [`cli`] (the binary run on a fixture).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // test support: panicking is how a test fails

pub mod cli;
pub mod container;
pub mod crash;
pub mod crash_child;
pub mod eraser;
pub mod gates;
pub mod oci_image;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_workspace::namespace::cgroup::{CgroupLayout, leaked_paths, remove_parent};
use agent_workspace::namespace_stack;
use tempfile::TempDir;
use workspace_core::RunId;
use workspace_core::boundary::{CommandSpec, Stack};
use workspace_core::capacity::{Capacity, Resources};
use workspace_core::contract::{Contract, SourceSection, TaskShape};
use workspace_core::evidence::verify;
use workspace_core::journal;
use workspace_core::lifecycle::{State, Transition};
use workspace_core::runner::{Outcome, RunPaths, Runner, RunnerConfig};

/// The content of `hello.txt` in the fixture repository.
pub const HELLO: &str = "hello from the base commit\n";

/// Python that waits (up to 20 s) until 127.0.0.1:8000 accepts a connection:
/// a command that starts a server in the background ends with it, so the next
/// command finds it listening however loaded the host is.
pub const WAIT_FOR_PORT_8000: &str = "import socket, time
for _ in range(400):
    try:
        socket.create_connection(('127.0.0.1', 8000)).close()
        break
    except OSError:
        time.sleep(0.05)";

/// One test's world: a git repository with one commit, a runtime directory and an
/// evidence root under a 0755 temporary directory, and a cgroup parent named after
/// the test (removed, once empty, when the fixture is dropped).
pub struct Fixture {
    /// Keeps the directories alive.
    pub base: TempDir,
    /// The source repository.
    pub repo: PathBuf,
    /// The commit `HEAD` of `repo` resolves to.
    pub base_commit: String,
    /// The runner's runtime directory.
    pub runtime: PathBuf,
    /// The evidence root.
    pub evidence: PathBuf,
    /// The cgroup parent of this test's runs.
    pub cgroup_parent: String,
}

/// Fails the test at once, saying why, unless it runs as root: these tests
/// map host root's ids, make cgroups in the host's hierarchies, users and loop
/// devices (an ordinary user's runs are tested by `cli_ordinary_user`, which
/// makes its user as root).
pub fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the tests run as root (they make namespaces with host root's ids, cgroups, users and loop devices): run `cargo test --workspace` as root"
    );
}

impl Fixture {
    /// A fresh fixture for test `name` (unique within this process).
    pub fn new(name: &str) -> Self {
        require_root();
        let base = tempfile::Builder::new()
            .prefix(&format!("aw-{name}-"))
            .tempdir()
            .unwrap();
        Self::at(base, name)
    }

    /// A fixture over an existing directory (made 0755), e.g. one a parent test
    /// made for a child process. Creates the repository only if it is missing.
    pub fn at(base: TempDir, name: &str) -> Self {
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let repo = base.path().join("repo");
        if !repo.join(".git").exists() {
            make_repo(&repo);
        }
        let base_commit = git_stdout(&repo, &["rev-parse", "HEAD"]);
        Self {
            repo,
            base_commit,
            runtime: base.path().join("runtime"),
            evidence: base.path().join("evidence"),
            cgroup_parent: cgroup_parent_name(name),
            base,
        }
    }

    /// The default stack over this fixture's cgroup parent.
    pub fn stack(&self) -> Stack {
        namespace_stack(&self.cgroup_parent).unwrap()
    }

    /// The runner configuration of this fixture.
    pub fn config(&self) -> RunnerConfig {
        RunnerConfig::new(&self.runtime, &self.evidence)
    }

    /// A runner over `stack` with ample capacity.
    pub fn runner_with(&self, stack: Stack) -> Runner {
        Runner::new(stack, self.config(), Arc::new(Capacity::new(ample())))
    }

    /// A runner over the default stack with ample capacity.
    pub fn runner(&self) -> Runner {
        self.runner_with(self.stack())
    }

    /// A narrow-fix contract on the fixture repository at `HEAD`.
    pub fn contract(&self) -> Contract {
        self.contract_at("HEAD")
    }

    /// A narrow-fix contract on the fixture repository at `revision`.
    pub fn contract_at(&self, revision: &str) -> Contract {
        Contract::preset(
            TaskShape::NarrowFix,
            "runner end-to-end test",
            SourceSection::new(self.repo.to_string_lossy(), revision),
        )
    }

    /// Where run `run_id` lives.
    pub fn paths(&self, run_id: &RunId) -> RunPaths {
        RunPaths::new(&self.runtime, &self.evidence, run_id)
    }

    /// Asserts that nothing of run `run_id` remains but its evidence and journal:
    /// no run directory, no cgroup directory in any hierarchy, and no process whose
    /// command line holds any of `markers`.
    pub fn assert_nothing_left(&self, run_id: &RunId, markers: &[&str]) {
        let paths = self.paths(run_id);
        assert!(
            !paths.run_dir.exists(),
            "the run directory {} remains: {:?}",
            paths.run_dir.display(),
            list_dir(&paths.run_dir)
        );
        let layout = CgroupLayout::detect().unwrap();
        let leaked = leaked_paths(&layout, &self.cgroup_parent, run_id).unwrap();
        assert!(leaked.is_empty(), "cgroups of the run remain: {leaked:?}");
        for marker in markers {
            let alive = wait_until_gone(marker, Duration::from_secs(5));
            assert!(
                alive.is_empty(),
                "processes with marker {marker} survive: {alive:?}"
            );
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if std::thread::panicking() {
            end_processes_under(&self.cgroup_parent);
        }
        if let Ok(layout) = CgroupLayout::detect()
            && let Err(e) = remove_parent(&layout, &self.cgroup_parent)
        {
            eprintln!(
                "removing the test parent cgroup {} failed: {e}",
                self.cgroup_parent
            );
        }
    }
}

/// Kills every process in the cgroup parent `parent` (this test's own: nothing
/// else lives there), thawing frozen groups first: a test that failed half way
/// leaves no workspace of its running on the machine.
pub fn end_processes_under(parent: &str) {
    let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") else {
        return;
    };
    let mut roots: Vec<PathBuf> = hierarchies
        .flatten()
        .map(|h| h.path().join(parent))
        .collect();
    roots.push(Path::new("/sys/fs/cgroup").join(parent));
    let mut groups = Vec::new();
    let mut stack: Vec<PathBuf> = roots.into_iter().filter(|r| r.is_dir()).collect();
    while let Some(dir) = stack.pop() {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            stack.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
        }
        groups.push(dir);
    }
    for group in &groups {
        let _ = std::fs::write(group.join("cgroup.freeze"), "0");
        let _ = std::fs::write(group.join("freezer.state"), "THAWED");
    }
    for _ in 0..3 {
        for group in &groups {
            let pids = std::fs::read_to_string(group.join("cgroup.procs")).unwrap_or_default();
            for pid in pids.split_whitespace() {
                // The shell's own `kill`: no procps on a bare machine.
                let _ = std::process::Command::new("sh")
                    .args(["-c", "kill -KILL \"$1\"", "kill", pid])
                    .status();
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The cgroup parent of test `name` in this process.
pub fn cgroup_parent_name(name: &str) -> String {
    format!("aw-test-{name}-{}", std::process::id())
}

/// Capacity no test run exhausts.
pub fn ample() -> Resources {
    Resources {
        cpu_millis: u64::MAX / 4,
        memory_bytes: u64::MAX / 4,
        disk_bytes: u64::MAX / 4,
        slots: 1024,
    }
}

/// Makes a git repository at `path` with `hello.txt` and `src/lib.txt`, one commit.
pub fn make_repo(path: &Path) {
    std::fs::create_dir_all(path.join("src")).unwrap();
    git(path, &["init", "-q", "-b", "main"]);
    std::fs::write(path.join("hello.txt"), HELLO).unwrap();
    std::fs::write(path.join("src/lib.txt"), "one\ntwo\nthree\n").unwrap();
    git(path, &["add", "-A"]);
    git(path, &["commit", "-q", "-m", "base"]);
}

/// Runs `git args` in `dir` with a fixed identity and no user or system config.
pub fn git(dir: &Path, args: &[&str]) -> std::process::Output {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=Runner Test",
            "-c",
            "user.email=runner@test.invalid",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The trimmed standard output of `git args` in `dir`.
pub fn git_stdout(dir: &Path, args: &[&str]) -> String {
    String::from_utf8(git(dir, args).stdout)
        .unwrap()
        .trim()
        .to_owned()
}

/// A command in the workspace root.
pub fn command(argv: &[&str], timeout_ms: Option<u64>) -> CommandSpec {
    CommandSpec {
        timeout_ms,
        ..CommandSpec::new(argv.iter().map(|s| (*s).to_owned()).collect())
    }
}

/// `/bin/sh -c script`, with `marker` as `$0` so the shell's command line holds it.
pub fn shell(script: &str, marker: &str) -> CommandSpec {
    command(&["/bin/sh", "-c", script, marker], None)
}

/// Whether a process whose command line holds `marker` runs in a cgroup of
/// run `run` (not only the CLI that started it, whose command line holds the
/// marker too).
pub fn runs_in(marker: &str, run: &str) -> bool {
    processes_with(marker).into_iter().any(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|c| c.contains(run))
    })
}

/// A marker unique to this process and `what`, for finding a run's processes.
pub fn marker(what: &str) -> String {
    format!("aw-marker-{what}-{}", std::process::id())
}

/// The pids (host view) of processes whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<u32> {
    command_lines_with(marker)
        .into_iter()
        .map(|(pid, _)| pid)
        .collect()
}

/// The pids (host view) and command lines (NULs as spaces) of processes, but
/// this one, whose command line contains `marker`.
pub fn command_lines_with(marker: &str) -> Vec<(u32, String)> {
    let me = std::process::id();
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        // A process may end between read_dir and the read: that is not a survivor.
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        // A zombie has an empty command line and holds nothing.
        if cmdline.contains(marker) && !is_zombie(pid) {
            found.push((pid, cmdline));
        }
    }
    found
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next().map(|s| s == "Z"))
        })
        .unwrap_or(false)
}

/// Waits up to `limit` for every process with `marker` to go; returns the survivors.
pub fn wait_until_gone(marker: &str, limit: Duration) -> Vec<u32> {
    let deadline = Instant::now() + limit;
    loop {
        let alive = processes_with(marker);
        if alive.is_empty() || Instant::now() >= deadline {
            return alive;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits up to `limit` for a process with `marker` to appear.
pub fn wait_for_process(marker: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if !processes_with(marker).is_empty() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Asserts that the bundle in `dir` is sealed and intact.
pub fn assert_intact(dir: &Path) {
    assert!(
        dir.join("manifest.json").is_file(),
        "{} is not sealed: {:?}",
        dir.display(),
        list_dir(dir)
    );
    let report = verify(dir).unwrap();
    assert!(
        report.is_intact(),
        "{} is not intact: {:?}",
        dir.display(),
        report.problems
    );
    assert!(report.files_checked > 0);
}

/// Asserts that each of `files` (paths relative to `dir`) is a file.
pub fn assert_has_files(dir: &Path, files: &[&str]) {
    for file in files {
        assert!(
            dir.join(file).is_file(),
            "{file} missing: {:?}",
            list_tree(dir)
        );
    }
}

/// `outcome.json` of the bundle in `dir`.
pub fn read_outcome(dir: &Path) -> Outcome {
    serde_json::from_slice(&std::fs::read(dir.join("outcome.json")).unwrap()).unwrap()
}

/// Any JSON file of the bundle in `dir`.
pub fn read_json(dir: &Path, name: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join(name)).unwrap()).unwrap()
}

/// The paths `changes.json` lists as ignored (the repository's ignore rules),
/// sorted.
pub fn ignored_paths(changes: &serde_json::Value) -> Vec<&str> {
    let mut ignored: Vec<&str> = changes
        .as_array()
        .expect("changes.json is a list")
        .iter()
        .filter(|c| c["ignored"] == true)
        .map(|c| c["path"].as_str().expect("a path"))
        .collect();
    ignored.sort_unstable();
    ignored
}

/// Every state the journal at `path` went through, in order.
pub fn journal_states(path: &Path) -> Vec<State> {
    let read = journal::read::<Transition>(path).unwrap();
    assert!(
        read.torn_tail.is_none(),
        "torn journal tail: {:?}",
        read.torn_tail
    );
    read.records.into_iter().map(|r| r.event.to).collect()
}

/// The names of the entries of `dir` (empty if it does not exist).
pub fn list_dir(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            let mut names: Vec<String> = entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        })
        .unwrap_or_default()
}

/// Every file under `dir`, relative, sorted (empty if it does not exist).
pub fn list_tree(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, out);
            }
            out.push(
                path.strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

//! Fixtures for the benchmarks: generated repositories and the git baselines.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)] // benchmark fixtures

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A repository generated with `git fast-import`: `files` files of about
/// `bytes_per_file` bytes of text spread over `dirs` directories, one commit.
pub struct GeneratedRepo {
    /// Keeps the repository alive.
    pub dir: tempfile::TempDir,
    /// The repository (non-bare, its work tree left empty).
    pub path: PathBuf,
    /// The commit id.
    pub commit: String,
    /// The number of files.
    pub files: usize,
}

/// `git` with no host or user configuration.
pub fn git(dir: &Path) -> Command {
    let mut command = Command::new("git");
    command
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(["-c", "user.name=bench", "-c", "user.email=bench@localhost"]);
    command
}

/// Runs `command`, panicking with its stderr when it fails.
pub fn run(command: &mut Command) {
    let out = command.output().expect("run git (install git)");
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Generates the repository under `parent` (fresh path per call).
pub fn generate(parent: &Path, files: usize, dirs: usize, bytes_per_file: usize) -> GeneratedRepo {
    let dir = tempfile::Builder::new()
        .prefix("repo-")
        .tempdir_in(parent)
        .unwrap();
    let path = dir.path().join("source");
    std::fs::create_dir(&path).unwrap();
    run(git(&path).args(["init", "-q", "-b", "main"]));
    let mut import = git(&path)
        .args(["fast-import", "--quiet"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("git fast-import");
    let mut stream = std::io::BufWriter::new(import.stdin.take().unwrap());
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut line = String::new();
    for i in 0..files {
        let mut content = Vec::with_capacity(bytes_per_file + 80);
        while content.len() < bytes_per_file {
            // xorshift64: distinct, poorly compressible text.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            line.clear();
            use std::fmt::Write as _;
            let _ = writeln!(line, "{i:06} {state:016x} {:016x}", state.rotate_left(17));
            content.extend_from_slice(line.as_bytes());
        }
        write!(stream, "blob\nmark :{}\ndata {}\n", i + 1, content.len()).unwrap();
        stream.write_all(&content).unwrap();
        stream.write_all(b"\n").unwrap();
    }
    write!(
        stream,
        "commit refs/heads/main\nmark :{}\ncommitter bench <bench@localhost> 0 +0000\ndata 9\ngenerated\n",
        files + 1
    )
    .unwrap();
    for i in 0..files {
        writeln!(stream, "M 100644 :{} d{:03}/f{i:05}.txt", i + 1, i % dirs).unwrap();
    }
    stream.write_all(b"\n").unwrap();
    drop(stream);
    assert!(import.wait().unwrap().success(), "git fast-import failed");
    let out = git(&path).args(["rev-parse", "main"]).output().unwrap();
    let commit = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    GeneratedRepo {
        dir,
        path,
        commit,
        files,
    }
}

/// The baseline a user would otherwise reach for: `git worktree add --detach`.
pub fn git_worktree_add(repo: &GeneratedRepo, dest: &Path) {
    run(git(&repo.path)
        .args(["worktree", "add", "-q", "--detach"])
        .arg(dest)
        .arg(&repo.commit));
}

/// The other baseline: `git clone --shared --no-checkout` then `git checkout`.
pub fn git_clone_shared(repo: &GeneratedRepo, dest: &Path) {
    run(git(&repo.path)
        .args(["clone", "-q", "--shared", "--no-checkout"])
        .arg(&repo.path)
        .arg(dest));
    run(git(dest)
        .args(["checkout", "-q", "--detach"])
        .arg(&repo.commit));
}

/// A fresh directory for a bench's files, 0755: the runs' mapped ids must
/// traverse it to their checkouts under it.
pub fn bench_root(prefix: &str) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    root
}

/// Asserts that no run is left under `runtime` and removes the bench's cgroup
/// parent (which fails while anything of a run is left in it).
pub fn assert_nothing_left(runtime: &Path, cgroup_parent: &str) {
    use agent_workspace::core::runner::RUNS_DIR;
    use agent_workspace::namespace::cgroup::{CgroupLayout, remove_parent};
    let left: Vec<_> = std::fs::read_dir(runtime.join(RUNS_DIR))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    let parent = CgroupLayout::detect()
        .map_err(|e| e.to_string())
        .and_then(|layout| remove_parent(&layout, cgroup_parent).map_err(|e| e.to_string()));
    assert!(
        left.is_empty() && parent.is_ok(),
        "left behind: {left:?} {parent:?}"
    );
    println!("nothing left behind; cgroup parent {cgroup_parent} removed");
}

/// What a bench drives live workspaces with: a runner over the layered default
/// stack with ample capacity, in a directory of its own, on a generated
/// repository of 200 files.
pub struct LiveBench {
    /// The runner.
    pub runner: agent_workspace::core::runner::Runner,
    /// Its runtime directory.
    pub runtime: PathBuf,
    /// Its runs' cgroup parent.
    pub cgroup_parent: String,
    /// The repository the contracts check out.
    pub repo: GeneratedRepo,
    /// Keeps the directory alive.
    pub root: tempfile::TempDir,
}

impl LiveBench {
    /// A fresh one for the bench `name` (`aw-bench-NAME-...`).
    pub fn new(name: &str) -> Self {
        use agent_workspace::core::capacity::{Capacity, Resources};
        use agent_workspace::core::runner::{Runner, RunnerConfig};
        let root = bench_root(&format!("aw-bench-{name}-"));
        let repos = root.path().join("repos");
        std::fs::create_dir(&repos).unwrap();
        let repo = generate(&repos, 200, 20, 1_000);
        let cgroup_parent = format!("aw-bench-{name}-{}", std::process::id());
        let runtime = root.path().join("runtime");
        let stack = agent_workspace::namespace_stack_layered(
            &cgroup_parent,
            root.path().join("cache"),
            1 << 30,
        )
        .unwrap();
        let runner = Runner::new(
            stack,
            RunnerConfig::new(&runtime, root.path().join("evidence")),
            std::sync::Arc::new(Capacity::new(Resources {
                cpu_millis: 64_000,
                memory_bytes: 256 << 30,
                disk_bytes: 1 << 40,
                slots: 1024,
            })),
        );
        Self {
            runner,
            runtime,
            cgroup_parent,
            repo,
            root,
        }
    }

    /// The narrow-fix preset on the bench's repository.
    pub fn contract(&self) -> agent_workspace::core::contract::Contract {
        use agent_workspace::core::contract::{Contract, SourceSection, TaskShape};
        Contract::preset(
            TaskShape::NarrowFix,
            "bench",
            SourceSection::new(self.repo.path.to_string_lossy(), "HEAD"),
        )
    }
}

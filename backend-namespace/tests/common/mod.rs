//! Fixtures shared by the namespace backend's integration tests (`spawn.rs`,
//! `attacks.rs`): a workspace, a sentinel outside it, the mount plan over them,
//! and helpers to run a command and to find what is left of a pid namespace.
//!
//! Layout on the host (one `TempDir`, mode 0755 so that only the isolation, not
//! the permission bits of a private temporary directory, keeps the run out):
//!
//! ```text
//! <base>/workspace/hello.txt   owned by HOST_ID, bound at /workspace
//! <base>/outside/sentinel      "host only", never bound
//! ```
#![allow(dead_code)] // each test binary uses a different subset

use std::io::Read;
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Path, PathBuf};

use backend_namespace::spawn::{SpawnRequest, spawn};
use tempfile::TempDir;
use workspace_core::RunId;
use workspace_core::boundary::{IdentityPlan, LayersRecord, OriginRecord, SourceRecord};
use workspace_core::contract::{Contract, Materialization, SourceSection, TaskShape, UserClass};
use workspace_core::evidence::ExitStatusRecord;
use workspace_core::mount_plan::{HostLayout, MountPlan, PlanInputs, SystemEntry};

/// The unprivileged host id the run's uid/gid 1000 map to.
pub const HOST_ID: u32 = 100_000;
/// The run id (and so the hostname inside).
pub const RUN_ID: &str = "spawn-test-run";

/// A workspace with one file, a sentinel outside it, and the plan over them.
pub struct Fixture {
    /// The temporary directory holding `workspace/` and `outside/`.
    pub base: TempDir,
    /// The plan; tests may push steps before spawning.
    pub plan: MountPlan,
}

impl Fixture {
    /// The layout above, with a bind-mounted workspace.
    pub fn new() -> Self {
        assert!(
            nix::unistd::geteuid().is_root(),
            "the tests run as root (they map host ids and make cgroups): run `cargo test --workspace` as root"
        );
        let base = tempfile::tempdir().unwrap();
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let workspace = base.path().join("workspace");
        std::fs::create_dir(&workspace).unwrap();
        std::fs::write(workspace.join("hello.txt"), "hello from the workspace\n").unwrap();
        for path in [workspace.clone(), workspace.join("hello.txt")] {
            chown(&path, Some(HOST_ID), Some(HOST_ID)).unwrap();
        }
        let outside = base.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("sentinel"), "host only").unwrap();
        let plan = plan_for(&workspace, None);
        Self { base, plan }
    }

    /// The workspace on the host.
    pub fn workspace(&self) -> PathBuf {
        self.base.path().join("workspace")
    }

    /// The directory beside the workspace that is never bound.
    pub fn outside(&self) -> PathBuf {
        self.base.path().join("outside")
    }

    /// A file outside the workspace.
    pub fn sentinel(&self) -> PathBuf {
        self.outside().join("sentinel")
    }

    /// `sh -c script` as uid/gid 1000 (host `HOST_ID`) with `PATH` and `HOME` only.
    pub fn request(&self, script: &str) -> SpawnRequest {
        self.request_argv(vec![sh(), "-c".into(), script.into()])
    }

    /// `argv` as uid/gid 1000 (host `HOST_ID`) with `PATH` and `HOME` only.
    pub fn request_argv(&self, argv: Vec<String>) -> SpawnRequest {
        let mut request = SpawnRequest::new(self.plan.clone(), argv);
        request.uid = 1000;
        request.gid = 1000;
        request.host_uid = HOST_ID;
        request.host_gid = HOST_ID;
        request.env = vec![
            ("PATH".into(), "/usr/bin:/bin:/usr/sbin:/sbin".into()),
            ("HOME".into(), "/home/agent".into()),
        ];
        request
    }
}

/// `/bin/sh` resolved on the host (the same file is visible inside).
pub fn sh() -> String {
    let path = Path::new("/bin/sh");
    assert!(path.exists(), "the tests need /bin/sh");
    path.to_string_lossy().into_owned()
}

/// The host's base system as this host has it.
pub fn host_layout() -> HostLayout {
    let mut system = vec![SystemEntry::Dir {
        path: "/usr".into(),
    }];
    for path in ["/bin", "/lib", "/lib64", "/sbin"] {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            let to = std::fs::read_link(path)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            system.push(SystemEntry::Symlink {
                path: path.into(),
                to,
            });
        } else if meta.is_dir() {
            system.push(SystemEntry::Dir { path: path.into() });
        }
    }
    let etc = ["/etc/resolv.conf"]
        .into_iter()
        .filter(|p| Path::new(p).exists())
        .map(PathBuf::from)
        .collect();
    HostLayout {
        system,
        etc,
        ..HostLayout::default()
    }
}

/// The plan of a narrow-fix run over `workspace` (overlaid with `layers` if given).
pub fn plan_for(workspace: &Path, layers: Option<LayersRecord>) -> MountPlan {
    let contract = Contract::preset(
        TaskShape::NarrowFix,
        "spawn tests",
        SourceSection::new("/srv/repo", "HEAD"),
    );
    let source = SourceRecord {
        repository: "/srv/repo".into(),
        remote_urls: Vec::new(),
        commit: "a".repeat(40),
        tree: "b".repeat(40),
        origin: OriginRecord::Fresh,
        materialization: Materialization::Standalone,
        workspace: workspace.to_path_buf(),
        layers,
        submodules: Vec::new(),
        inputs: Vec::new(),
        initial_diff: String::new(),
        pinned: Vec::new(),
        objects: None,
    };
    let identity = IdentityPlan {
        user: UserClass::Unprivileged,
        uid: 1000,
        gid: 1000,
        credentials: Vec::new(),
    };
    let run_id = RunId::new(RUN_ID).unwrap();
    let host = host_layout();
    MountPlan::build(&PlanInputs {
        contract: &contract,
        run_id: &run_id,
        source: &source,
        source_objects: None,
        identity: &identity,
        host: &host,
        excluded: &[],
        pty: false,
        templates: &[],
    })
    .unwrap()
}

/// Runs `request` with stdout and stderr on one pipe; returns the status and output.
pub fn run(mut request: SpawnRequest) -> (ExitStatusRecord, String) {
    let (read, write) = nix::unistd::pipe().unwrap();
    request.stdout = Some(write.try_clone().unwrap());
    request.stderr = Some(write);
    let mut child = spawn(&request).unwrap();
    drop(request); // the parent's copies of the write end
    let mut output = String::new();
    std::fs::File::from(read)
        .read_to_string(&mut output)
        .unwrap();
    let status = child.wait().unwrap();
    (status, output)
}

/// The pid namespace of `pid` (`pid:[inode]`), if it still exists.
pub fn pid_ns(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()
}

/// Host processes in the namespace `ns`.
pub fn members_of(ns: &Path) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| pid_ns(*pid).as_deref() == Some(ns))
        .collect()
}

/// Processes left in the ended namespace `ns`. Namespace inode numbers are reused,
/// so a namespace that has a live init (a process whose innermost pid is 1) is a
/// newer run's, not what is left of this one.
pub fn leftovers_of(ns: &Path) -> Vec<u32> {
    let members = members_of(ns);
    let has_init = members.iter().any(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("NSpid:"))
                    .map(str::to_owned)
            })
            .is_some_and(|l| l.split_whitespace().last() == Some("1"))
    });
    if has_init { Vec::new() } else { members }
}

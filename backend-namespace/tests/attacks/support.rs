//! What the attack tests share: the attack fixture, snapshots of the host state an
//! attack must leave alone, a host canary process, the probe (this test binary
//! re-executed inside a run) and a guard for the test's cgroups.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt, chown, lchown};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use backend_namespace::cgroup::{CgroupLayout, Controller, Placement, RunCgroup, remove_parent};
use backend_namespace::spawn::{SpawnRequest, SpawnedChild, spawn};
use workspace_core::RunId;
use workspace_core::boundary::ResolvedLimits;
use workspace_core::mount_plan::{MountAction, MountStep, Reason};

use crate::common::{Fixture, HOST_ID};

/// Where the probe (this test binary) appears inside a run.
pub const PROBE: &str = "/probe/attacks";
/// Selects the probe's role in a re-executed test binary.
pub const ROLE_VAR: &str = "AW_ATTACK_PROBE";
/// The role's argument.
pub const ARG_VAR: &str = "AW_ATTACK_ARG";
/// What a run writes when an attack worked; never expected in an output.
pub const PWNED: &str = "pwned-by-the-run";

/// A fixture whose host files the run's host id *could* write if it reached them:
/// `outside/` and the sentinel are owned by `HOST_ID` (sentinel mode 0666), so
/// only the isolation stands between the run and them, not permission bits.
pub fn attack_fixture() -> Fixture {
    let fixture = Fixture::new();
    chown(fixture.outside(), Some(HOST_ID), Some(HOST_ID)).unwrap();
    chown(fixture.sentinel(), Some(HOST_ID), Some(HOST_ID)).unwrap();
    std::fs::set_permissions(fixture.sentinel(), std::fs::Permissions::from_mode(0o666)).unwrap();
    fixture
}

/// Plants a symlink in the workspace (owned by the run's host id, as an agent's
/// would be).
pub fn plant_symlink(fixture: &Fixture, name: &str, to: &Path) {
    let link = fixture.workspace().join(name);
    std::os::unix::fs::symlink(to, &link).unwrap();
    lchown(&link, Some(HOST_ID), Some(HOST_ID)).unwrap();
}

/// Adds a read-only bind of this test binary at [`PROBE`] to the fixture's plan.
pub fn with_probe(fixture: &mut Fixture) {
    fixture.plan.steps.push(MountStep {
        target: PROBE.into(),
        action: MountAction::Bind {
            source: std::env::current_exe().unwrap(),
            read_only: true,
        },
        reason: Reason::HostMount,
    });
}

/// A request running the probe in `role` with `arg` (the fixture needs [`with_probe`]).
pub fn probe_request(fixture: &Fixture, role: &str, arg: &str) -> SpawnRequest {
    let mut request = fixture.request_argv(probe_argv());
    request.env.push((ROLE_VAR.into(), role.into()));
    request.env.push((ARG_VAR.into(), arg.into()));
    request
}

/// The probe's command line (only `attack_probe_role` runs).
pub fn probe_argv() -> Vec<String> {
    [
        PROBE,
        "--ignored",
        "--exact",
        "attack_probe_role",
        "--nocapture",
        "--test-threads=1",
        "-q",
    ]
    .map(String::from)
    .to_vec()
}

/// The `probe: ` lines of an output, without the prefix.
pub fn probe_lines(output: &str) -> Vec<&str> {
    output
        .lines()
        .filter_map(|l| l.strip_prefix("probe: "))
        .collect()
}

/// One host file or directory as an attack must leave it.
#[derive(Debug, PartialEq, Eq)]
struct Entry {
    bytes: Option<Vec<u8>>,
    len: u64,
    mtime_ns: (i64, i64),
    mode: u32,
    uid: u32,
    nlink: u64,
}

/// Every entry under a host directory (not following links), for a before/after
/// comparison.
#[derive(Debug, PartialEq, Eq)]
pub struct HostSnapshot(BTreeMap<PathBuf, Entry>);

impl HostSnapshot {
    /// Captures `dir` and everything below it.
    pub fn of(dir: &Path) -> Self {
        let mut map = BTreeMap::new();
        capture(dir, &mut map);
        Self(map)
    }

    /// Panics, naming the attack, if `dir` changed since this snapshot.
    pub fn assert_unchanged(&self, dir: &Path, attack: &str) {
        let now = Self::of(dir);
        assert_eq!(
            self,
            &now,
            "{attack}: the host directory {} changed",
            dir.display()
        );
    }
}

fn capture(path: &Path, map: &mut BTreeMap<PathBuf, Entry>) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    let bytes = meta
        .file_type()
        .is_file()
        .then(|| std::fs::read(path).unwrap());
    map.insert(
        path.to_path_buf(),
        Entry {
            bytes,
            len: meta.len(),
            mtime_ns: (meta.mtime(), meta.mtime_nsec()),
            mode: meta.mode(),
            uid: meta.uid(),
            nlink: meta.nlink(),
        },
    );
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            capture(&entry.unwrap().path(), map);
        }
    }
}

/// The host's hostname.
pub fn host_hostname() -> String {
    nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// A `sleep` the test spawned on the host, killed and reaped on drop.
pub struct Canary(Child);

impl Canary {
    /// Starts `sleep 300` on the host.
    pub fn start() -> Self {
        Self(
            Command::new("sleep")
                .arg("300")
                .stdin(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }

    /// Its host pid.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Whether it is still running (not exited, not killed).
    pub fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A spawned run whose combined output is read line by line.
pub struct LiveRun {
    /// The run (killed and reaped when dropped).
    pub child: SpawnedChild,
    lines: BufReader<std::fs::File>,
    /// Everything read so far.
    pub output: String,
}

impl LiveRun {
    /// Spawns `request` with stdout and stderr on one pipe.
    pub fn start(mut request: SpawnRequest) -> Self {
        let (read, write) = nix::unistd::pipe().unwrap();
        request.stdout = Some(write.try_clone().unwrap());
        request.stderr = Some(write);
        let child = spawn(&request).unwrap();
        drop(request);
        Self {
            child,
            lines: BufReader::new(std::fs::File::from(read)),
            output: String::new(),
        }
    }

    /// Reads lines until one contains `needle`; panics at EOF.
    pub fn wait_for(&mut self, needle: &str) {
        loop {
            let mut line = String::new();
            let n = self.lines.read_line(&mut line).unwrap();
            self.output.push_str(&line);
            assert!(n > 0, "the run ended before {needle:?}:\n{}", self.output);
            if line.contains(needle) {
                return;
            }
        }
    }
}

/// Polls `f` every 10 ms until it is true or `limit` passes; returns whether it was.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The test's parent cgroups `agent-workspace-test-<pid>-<n>`, removed on drop.
pub struct CgroupParent {
    /// The detected layout.
    pub layout: CgroupLayout,
    /// The parent's name.
    pub name: String,
}

impl CgroupParent {
    /// A fresh parent; fails (never skips) when a controller is missing.
    pub fn new() -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let layout = CgroupLayout::detect()
            .unwrap_or_else(|e| panic!("cgroup detection failed; these tests need cgroups: {e}"));
        for controller in Controller::ALL {
            if let Placement::Missing { reason } = layout.placement(controller) {
                panic!("these tests need the {controller} controller, which is missing: {reason}");
            }
        }
        let n = N.fetch_add(1, Ordering::Relaxed);
        Self {
            layout,
            name: format!("agent-workspace-test-{}-{n}", std::process::id()),
        }
    }

    /// A run group with `limits` under this parent.
    pub fn run(&self, tag: &str, limits: &ResolvedLimits) -> RunCgroup {
        let id = RunId::new(format!("atk-{tag}-{}", std::process::id())).unwrap();
        RunCgroup::create(&self.layout, &self.name, &id, limits).unwrap()
    }
}

impl Drop for CgroupParent {
    fn drop(&mut self) {
        if let Err(e) = remove_parent(&self.layout, &self.name) {
            eprintln!("removing test parent cgroup {} failed: {e}", self.name);
        }
    }
}

/// The directories of a run group, for `SpawnRequest::cgroups`.
pub fn cgroup_dirs(run: &RunCgroup) -> Vec<PathBuf> {
    run.paths().into_iter().map(PathBuf::from).collect()
}

/// A name no other test or process uses (abstract sockets, host paths).
pub fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "aw-attack-{tag}-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

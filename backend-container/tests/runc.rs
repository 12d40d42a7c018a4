//! A bundle built from the core mount plan, run by a real OCI runtime: the
//! container sees its checkout and nothing else of the host, runs as the
//! run's unprivileged id with no capability, keeps its state between
//! commands (one live container), pauses and resumes, and leaves nothing
//! behind when deleted.
//!
//! Needs root, user namespaces, cgroups and runc (Debian package runc).
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use backend_container::ContainerError;
use backend_container::bundle::{self, BundleInputs, IdMaps};
use backend_container::runtime::{ExecSpec, Runtime};
use oci_spec::runtime::ContainerState;
use workspace_core::RunId;
use workspace_core::boundary::{IdentityPlan, OriginRecord, ResolvedLimits, SourceRecord};
use workspace_core::contract::{Contract, Materialization, SourceSection, TaskShape, UserClass};
use workspace_core::mount_plan::{MountPlan, PlanInputs, probe_host_layout};

const RUN_UID: u32 = 1000;
const HOST_ID_BASE: u32 = 100_000;

/// A checkout of the run's own (owned by its host ids) and the plan over it.
struct Fixture {
    base: tempfile::TempDir,
    checkout: PathBuf,
    plan: MountPlan,
    cgroup_parent: String,
}

impl Fixture {
    fn new(id: &str) -> Self {
        let base = tempfile::Builder::new()
            .prefix("aw-container-")
            .tempdir()
            .unwrap();
        let mode: std::fs::Permissions = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(base.path(), mode).unwrap();
        let checkout = base.path().join("checkout");
        std::fs::create_dir(&checkout).unwrap();
        std::fs::write(checkout.join("hello.txt"), "hello from the checkout\n").unwrap();
        let host_id = HOST_ID_BASE + RUN_UID;
        for path in [&checkout, &checkout.join("hello.txt")] {
            std::os::unix::fs::chown(path, Some(host_id), Some(host_id)).unwrap();
        }
        let source = SourceRecord {
            repository: checkout.to_string_lossy().into_owned(),
            remote_urls: Vec::new(),
            commit: "a".repeat(40),
            tree: "b".repeat(40),
            origin: OriginRecord::Fresh,
            materialization: Materialization::Standalone,
            workspace: checkout.clone(),
            layers: None,
            submodules: Vec::new(),
            inputs: Vec::new(),
            initial_diff: String::new(),
            pinned: Vec::new(),
            objects: None,
        };
        let contract = Contract::preset(
            TaskShape::NarrowFix,
            "container test",
            SourceSection::new(checkout.to_string_lossy(), "HEAD"),
        );
        let identity = IdentityPlan {
            user: UserClass::Unprivileged,
            uid: RUN_UID,
            gid: RUN_UID,
            credentials: Vec::new(),
        };
        let host = probe_host_layout().unwrap();
        let run_id = RunId::new(id).unwrap();
        let plan = MountPlan::build(&PlanInputs {
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
        .unwrap();
        Self {
            base,
            checkout,
            plan,
            cgroup_parent: format!("aw-container-test-{}", std::process::id()),
        }
    }

    fn runtime(&self) -> Runtime {
        Runtime::find(Some("runc"), &self.base.path().join("state"))
            .unwrap_or_else(|e| panic!("{e} (these tests need runc: apt-get install runc)"))
    }

    /// Writes the bundle of a container holding the sandbox with `sleep`.
    fn bundle(&self, id: &str) -> PathBuf {
        let dir = self.base.path().join("bundle");
        std::fs::create_dir(&dir).unwrap();
        let limits = ResolvedLimits {
            memory_bytes: Some(256 << 20),
            pids: Some(64),
            cpu_millis: Some(1000),
            open_files: Some(1024),
            ..ResolvedLimits::default()
        };
        let spec = bundle::spec(&BundleInputs {
            plan: &self.plan,
            argv: &["/usr/bin/sleep".to_owned(), "infinity".to_owned()],
            env: &[("PATH".to_owned(), "/usr/bin:/bin".to_owned())],
            ids: IdMaps {
                uid: RUN_UID,
                gid: RUN_UID,
                host_uid: HOST_ID_BASE + RUN_UID,
                host_gid: HOST_ID_BASE + RUN_UID,
                host_root: HOST_ID_BASE,
            },
            limits: &limits,
            cgroups_path: &format!("{}/{id}", self.cgroup_parent),
        })
        .unwrap();
        bundle::write(&dir, &self.plan, &spec, HOST_ID_BASE).unwrap();
        dir
    }

    /// The run's cgroup directories in every hierarchy that has one.
    fn cgroups(&self, id: &str) -> Vec<PathBuf> {
        std::fs::read_dir("/sys/fs/cgroup")
            .unwrap()
            .flatten()
            .map(|e| e.path().join(&self.cgroup_parent).join(id))
            .filter(|p| p.is_dir())
            .collect()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // A test that failed half way: its containers go first (only those
        // under this fixture's own state directory).
        let state = self.base.path().join("state");
        if let Ok(out) = std::process::Command::new("runc")
            .arg("--root")
            .arg(&state)
            .args(["list", "-q"])
            .output()
        {
            for id in String::from_utf8_lossy(&out.stdout).lines() {
                let _ = std::process::Command::new("runc")
                    .arg("--root")
                    .arg(&state)
                    .args(["delete", "--force", id])
                    .status();
            }
        }
        for hierarchy in std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
        {
            let _ = std::fs::remove_dir(hierarchy.path().join(&self.cgroup_parent));
        }
    }
}

/// `sh -c SCRIPT` in container `id`, run to its end.
fn exec(runtime: &Runtime, id: &str, script: &str) -> Output {
    let spec = ExecSpec {
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        cwd: "/workspace".into(),
        uid: RUN_UID,
        gid: RUN_UID,
    };
    runtime
        .exec_command(id, &spec)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The container's OCI status, and whether it is paused.
fn status(runtime: &Runtime, id: &str) -> Option<(ContainerState, bool)> {
    runtime
        .state(id)
        .unwrap()
        .map(|status| (*status.state.status(), status.paused))
}

#[test]
fn a_bundle_from_the_mount_plan_runs_one_live_isolated_container_and_leaves_nothing() {
    let id = format!("aw-test-{}", std::process::id());
    let fixture = Fixture::new(&id);
    let runtime = fixture.runtime();
    assert_eq!(runtime.name(), "runc");
    assert!(
        runtime.version().starts_with("runc version"),
        "{}",
        runtime.version()
    );
    let secret = fixture.base.path().join("host-secret");
    std::fs::write(&secret, "host only\n").unwrap();

    runtime
        .run_detached(&id, &fixture.bundle(&id), Vec::new())
        .unwrap();
    let state = runtime
        .state(&id)
        .unwrap()
        .expect("the container exists")
        .state;
    assert_eq!(*state.status(), ContainerState::Running);
    let holder = state.pid().expect("a running container has a pid");
    assert!(
        !fixture.cgroups(&id).is_empty(),
        "no cgroup of the container"
    );

    // Its checkout, as the run's unprivileged id, under the run's hostname.
    assert_eq!(
        stdout(&exec(&runtime, &id, "cat hello.txt")),
        "hello from the checkout\n"
    );
    assert_eq!(
        stdout(&exec(&runtime, &id, "id -u; id -g; hostname")),
        format!("{RUN_UID}\n{RUN_UID}\n{id}\n")
    );
    let maps = stdout(&exec(
        &runtime,
        &id,
        "cat /proc/self/uid_map /proc/self/gid_map",
    ));
    let host_id = HOST_ID_BASE + RUN_UID;
    for line in [
        format!("0 {HOST_ID_BASE} 1"),
        format!("{RUN_UID} {host_id} 1"),
    ] {
        let seen = maps
            .lines()
            .filter(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") == line)
            .count();
        assert_eq!(seen, 2, "{line} in both maps: {maps}");
    }
    let status_lines = stdout(&exec(
        &runtime,
        &id,
        "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status",
    ));
    for (key, want) in [
        ("CapEff", "0000000000000000"),
        ("CapPrm", "0000000000000000"),
        ("CapBnd", "0000000000000000"),
        ("NoNewPrivs", "1"),
        ("Seccomp", "2"),
    ] {
        assert!(
            status_lines
                .lines()
                .any(|l| l.starts_with(key) && l.ends_with(want)),
            "{key} {want}: {status_lines}"
        );
    }

    // It writes its checkout (as its host id), nothing else of the host.
    stdout(&exec(&runtime, &id, "echo made inside > new.txt"));
    let made = fixture.checkout.join("new.txt");
    assert_eq!(std::fs::read_to_string(&made).unwrap(), "made inside\n");
    assert_eq!(std::fs::metadata(&made).unwrap().uid(), host_id);
    let attacks = format!(
        "cat '{s}' && echo READ-SECRET; echo x > /usr/attack && echo WROTE-USR; \
         unshare -U true && echo NEW-USERNS; exit 0",
        s = secret.display()
    );
    let out = stdout(&exec(&runtime, &id, &attacks));
    for breach in ["READ-SECRET", "WROTE-USR", "NEW-USERNS"] {
        assert!(!out.contains(breach), "{breach}: {out}");
    }
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "host only\n");
    assert!(!Path::new("/usr/attack").exists());

    // One live container: what one command leaves, the next one finds.
    stdout(&exec(&runtime, &id, "echo kept > /tmp/between"));
    assert_eq!(stdout(&exec(&runtime, &id, "cat /tmp/between")), "kept\n");

    runtime.pause(&id).unwrap();
    assert_eq!(status(&runtime, &id), Some((ContainerState::Running, true)));
    runtime.resume(&id).unwrap();
    assert_eq!(
        status(&runtime, &id),
        Some((ContainerState::Running, false))
    );

    runtime.delete(&id).unwrap();
    assert_eq!(status(&runtime, &id), None);
    assert!(
        !Path::new(&format!("/proc/{holder}")).exists()
            || std::fs::read_to_string(format!("/proc/{holder}/cmdline"))
                .map_or(true, |c| !c.contains("sleep")),
        "the container's pid 1 outlived delete"
    );
    assert_eq!(fixture.cgroups(&id), Vec::<PathBuf>::new());
}

#[test]
fn a_plan_the_runtime_cannot_keep_is_refused_naming_the_step() {
    let mut fixture = Fixture::new("aw-test-refused");
    let overlay = workspace_core::mount_plan::MountStep {
        target: "/workspace".into(),
        action: workspace_core::mount_plan::MountAction::Overlay {
            lower: "/l".into(),
            upper: "/u".into(),
            work: "/w".into(),
        },
        reason: workspace_core::mount_plan::Reason::Workspace,
    };
    fixture.plan.steps.push(overlay);
    let error = bundle::spec(&BundleInputs {
        plan: &fixture.plan,
        argv: &["/usr/bin/true".to_owned()],
        env: &[],
        ids: IdMaps {
            uid: RUN_UID,
            gid: RUN_UID,
            host_uid: HOST_ID_BASE + RUN_UID,
            host_gid: HOST_ID_BASE + RUN_UID,
            host_root: HOST_ID_BASE,
        },
        limits: &ResolvedLimits::default(),
        cgroups_path: "aw-test/refused",
    })
    .unwrap_err()
    .to_string();
    assert!(error.contains("an overlay"), "{error}");
    assert!(error.contains("at /workspace"), "{error}");
}

#[test]
fn crun_on_a_hybrid_cgroup_host_is_refused_saying_why() {
    let hybrid =
        Path::new("/sys/fs/cgroup/unified").is_dir() && Path::new("/sys/fs/cgroup/memory").is_dir();
    let found = Runtime::find(Some("crun"), Path::new("/nonexistent"));
    if let Err(ContainerError::NoRuntime { .. }) = &found {
        panic!("this test needs crun: apt-get install crun");
    }
    match (hybrid, found) {
        (true, Err(error)) => {
            let error = error.to_string();
            assert!(error.contains("hybrid"), "{error}");
        }
        (true, Ok(_)) => panic!("crun was accepted on a hybrid layout"),
        (false, found) => {
            let runtime = found.unwrap();
            assert_eq!(runtime.name(), "crun");
        }
    }
}

//! Integration tests for `spawn`: real namespaces, run as root.
//!
//! Containment: everything happens inside the new namespaces. The only host state
//! the tests touch is what they create (temporary directories, chowned to the
//! unprivileged host id the run maps to). Every spawned run is killed and reaped
//! when its `SpawnedChild` drops, so a failing assertion leaves no process behind.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::chown;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use backend_namespace::spawn::{ChildStage, SpawnError, SpawnRequest, SpawnedChild, spawn};
use nix::errno::Errno;
use tempfile::TempDir;
use workspace_core::RunId;
use workspace_core::boundary::{IdentityPlan, OriginRecord, SourceRecord};
use workspace_core::contract::{Contract, Materialization, SourceSection, TaskShape, UserClass};
use workspace_core::evidence::ExitStatusRecord;
use workspace_core::mount_plan::{HostLayout, MountPlan, PlanInputs, SystemEntry};

const HOST_ID: u32 = 100_000;
const RUN_ID: &str = "spawn-test-run";

/// A workspace with one file, a sentinel outside it, and the plan over them.
struct Fixture {
    _workspace: TempDir,
    outside: TempDir,
    plan: MountPlan,
}

impl Fixture {
    fn new() -> Self {
        let workspace = tempfile::tempdir().unwrap();
        std::fs::write(
            workspace.path().join("hello.txt"),
            "hello from the workspace\n",
        )
        .unwrap();
        for path in [
            workspace.path().to_path_buf(),
            workspace.path().join("hello.txt"),
        ] {
            chown(&path, Some(HOST_ID), Some(HOST_ID)).unwrap();
        }
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("sentinel"), "host only").unwrap();
        let plan = plan_for(workspace.path());
        Self {
            _workspace: workspace,
            outside,
            plan,
        }
    }

    fn sentinel(&self) -> PathBuf {
        self.outside.path().join("sentinel")
    }

    fn request(&self, script: &str) -> SpawnRequest {
        let mut request =
            SpawnRequest::new(self.plan.clone(), vec![sh(), "-c".into(), script.into()]);
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
fn sh() -> String {
    let path = Path::new("/bin/sh");
    assert!(path.exists(), "the tests need /bin/sh");
    path.to_string_lossy().into_owned()
}

/// The host's base system as this host has it.
fn host_layout() -> HostLayout {
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
    HostLayout { system, etc }
}

fn plan_for(workspace: &Path) -> MountPlan {
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
        layers: None,
        submodules: Vec::new(),
        inputs: Vec::new(),
        initial_diff: String::new(),
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
    })
    .unwrap()
}

/// Runs `request` with stdout and stderr on one pipe; returns the status and output.
fn run(mut request: SpawnRequest) -> (ExitStatusRecord, String) {
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
fn pid_ns(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()
}

/// Host processes in the namespace `ns`.
fn members_of(ns: &Path) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| pid_ns(*pid).as_deref() == Some(ns))
        .collect()
}

/// Processes left in the ended namespace `ns`. Namespace inode numbers are reused,
/// so a namespace that has a live init (a process whose innermost pid is 1) is a
/// newer run's, not what is left of this one.
fn leftovers_of(ns: &Path) -> Vec<u32> {
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

#[test]
fn the_command_sees_its_identity_hostname_workspace_and_nothing_of_the_host() {
    let fixture = Fixture::new();
    let script = format!(
        "id -u; id -g; cat /proc/sys/kernel/hostname; cat /workspace/hello.txt; \
         echo written > /workspace/new.txt && cat /workspace/new.txt; \
         touch /usr/x 2>&1; \
         grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Groups):' /proc/self/status; \
         echo procs=$(ls /proc | grep -c '^[0-9]'); \
         echo ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ,); \
         echo tmp=$(stat -f -c %T /tmp); \
         test -e {sentinel} && echo sentinel-visible || echo sentinel-hidden; \
         test -e /oldroot && echo oldroot-visible || echo oldroot-hidden; \
         echo cwd=$(pwd)",
        sentinel = fixture.sentinel().display()
    );
    let (status, out) = run(fixture.request(&script));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..5],
        [
            "1000",
            "1000",
            RUN_ID,
            "hello from the workspace",
            "written"
        ],
        "{out}"
    );
    assert!(lines[5].contains("Read-only file system"), "{out}");
    for expected in [
        "CapInh:\t0000000000000000",
        "CapPrm:\t0000000000000000",
        "CapEff:\t0000000000000000",
        "CapBnd:\t0000000000000000",
        "CapAmb:\t0000000000000000",
        "NoNewPrivs:\t1",
        "ifaces=lo,",
        "tmp=tmpfs",
        "sentinel-hidden",
        "oldroot-hidden",
        "cwd=/workspace",
    ] {
        assert!(lines.contains(&expected), "missing {expected:?} in:\n{out}");
    }
    // Supplementary groups were cleared (host root's group 0 does not come along).
    let groups = lines.iter().find(|l| l.starts_with("Groups:")).unwrap();
    assert_eq!(groups.trim_end(), "Groups:", "{out}");
    let procs: usize = lines
        .iter()
        .find_map(|l| l.strip_prefix("procs="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        procs <= 5,
        "only the run's processes are visible: {procs}\n{out}"
    );
    // The write went to the host workspace, owned by the mapped host id.
    let new = fixture._workspace.path().join("new.txt");
    assert_eq!(std::fs::read_to_string(&new).unwrap(), "written\n");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&new).unwrap().uid(), HOST_ID);
}

#[test]
fn exit_codes_and_signals_pass_through() {
    let fixture = Fixture::new();
    let (status, out) = run(fixture.request("exit 7"));
    assert_eq!(status, ExitStatusRecord::Code(7), "{out}");
    let (status, out) = run(fixture.request("kill -9 $$"));
    assert_eq!(status, ExitStatusRecord::Signal(9), "{out}");
    let (status, out) = run(fixture.request("echo pid=$$"));
    assert_eq!(status, ExitStatusRecord::Code(0));
    assert_eq!(out, "pid=2\n", "the command is pid 2 under its init");
}

#[test]
fn inherited_descriptors_are_closed() {
    let fixture = Fixture::new();
    // A descriptor without close-on-exec, like a lease file some other code opened.
    let lease = std::fs::File::open("/proc/self/status").unwrap();
    let leaked: OwnedFd = nix::unistd::dup(&lease).unwrap();
    let fd = leaked.as_raw_fd();
    let (status, out) = run(fixture.request("ls /proc/self/fd | sort -n | tr '\\n' ' '"));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    // 0-2 and the directory ls itself reads.
    assert_eq!(out.trim_end(), "0 1 2 3", "fd {fd} must not leak in");
}

#[test]
fn a_background_process_does_not_survive_the_command() {
    let fixture = Fixture::new();
    let (stdin_read, stdin_write) = nix::unistd::pipe().unwrap();
    let mut request = fixture.request("sleep 300 & read line; exit 0");
    request.stdin = Some(stdin_read);
    let mut child = spawn(&request).unwrap();
    drop(request);
    let init = child.pid();
    let ns = pid_ns(init).expect("the namespace init is alive");
    assert_ne!(pid_ns(std::process::id()).unwrap(), ns);
    // The sleeper appears in the namespace.
    let deadline = Instant::now() + Duration::from_secs(10);
    while members_of(&ns).len() < 3 {
        assert!(Instant::now() < deadline, "sleep never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(stdin_write); // `read` sees EOF; the shell exits 0
    let started = Instant::now();
    assert_eq!(child.wait().unwrap(), ExitStatusRecord::Code(0));
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!Path::new(&format!("/proc/{init}")).exists());
    assert_eq!(
        leftovers_of(&ns),
        Vec::<u32>::new(),
        "nothing of the run is left"
    );
}

#[test]
fn kill_ends_the_whole_namespace() {
    let fixture = Fixture::new();
    let mut child = spawn(&fixture.request("sleep 300 & sleep 300")).unwrap();
    let ns = pid_ns(child.pid()).unwrap();
    let killer = child.killer();
    let waiter = std::thread::spawn(move || child.wait().unwrap());
    std::thread::sleep(Duration::from_millis(100));
    killer.kill().unwrap();
    assert_eq!(waiter.join().unwrap(), ExitStatusRecord::Signal(9));
    assert_eq!(leftovers_of(&ns), Vec::<u32>::new());
    killer.kill().unwrap(); // after the reap: a no-op, never a recycled pid
}

#[test]
fn failures_name_the_stage_and_the_step() {
    let fixture = Fixture::new();

    let mut request = fixture.request("true");
    request.argv[0] = "sh".into();
    assert!(matches!(
        spawn(&request),
        Err(SpawnError::InvalidRequest {
            field: "argv[0]",
            ..
        })
    ));

    let mut request = fixture.request("true");
    request.host_uid = 0;
    assert!(matches!(
        spawn(&request),
        Err(SpawnError::InvalidRequest {
            field: "host_uid",
            ..
        })
    ));

    let mut request = fixture.request("true");
    request.argv[0] = "/usr/bin/does-not-exist".into();
    match spawn(&request) {
        Err(SpawnError::Child {
            stage: ChildStage::Exec,
            errno: Errno::ENOENT,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }

    let mut request = fixture.request("true");
    request.cwd = "/workspace/missing".into();
    match spawn(&request) {
        Err(SpawnError::Child {
            stage: ChildStage::Chdir,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }

    // A planted symlink on a mount target's path is refused, not followed.
    let mut request = fixture.request("true");
    std::os::unix::fs::symlink("/etc", fixture._workspace.path().join("link")).unwrap();
    request
        .plan
        .steps
        .push(workspace_core::mount_plan::MountStep {
            target: "/workspace/link/shadow".into(),
            action: workspace_core::mount_plan::MountAction::Mask { file: true },
            reason: workspace_core::mount_plan::Reason::Excluded,
        });
    let last = request.plan.steps.len() - 1;
    let error = spawn(&request).unwrap_err();
    match &error {
        SpawnError::Child {
            stage: ChildStage::MountStep,
            step: Some(step),
            target: Some(target),
            ..
        } => {
            assert_eq!(*step, last);
            assert_eq!(target, "/workspace/link/shadow");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        error.to_string().contains("/workspace/link/shadow"),
        "{error}"
    );

    let mut request = fixture.request("true");
    let missing = fixture.outside.path().join("missing");
    if let workspace_core::mount_plan::MountAction::Bind { source, .. } = &mut request
        .plan
        .steps
        .iter_mut()
        .find(|s| s.target == "/workspace")
        .unwrap()
        .action
    {
        *source = missing.clone();
    }
    match spawn(&request) {
        Err(SpawnError::Source { path, target, .. }) => {
            assert_eq!(path, missing);
            assert_eq!(target, "/workspace");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn eight_concurrent_spawns_from_a_multi_threaded_runtime() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let fixture = std::sync::Arc::new(Fixture::new());
    let results = runtime.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..8 {
            let fixture = fixture.clone();
            tasks.push(tokio::task::spawn_blocking(move || {
                let (read, write) = nix::unistd::pipe().unwrap();
                let mut request =
                    fixture.request(&format!("echo run-{i} $$; sleep 0.2 & exit {i}"));
                request.stdout = Some(write);
                let mut child: SpawnedChild = spawn(&request).unwrap();
                drop(request);
                let ns = pid_ns(child.pid()).unwrap();
                let mut out = String::new();
                std::fs::File::from(read).read_to_string(&mut out).unwrap();
                let status = child.wait().unwrap();
                (i, status, out, ns)
            }));
        }
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.unwrap());
        }
        results
    });
    for (i, status, out, ns) in results {
        assert_eq!(status, ExitStatusRecord::Code(i), "{out}");
        assert_eq!(out, format!("run-{i} 2\n"));
        assert_eq!(leftovers_of(&ns), Vec::<u32>::new());
    }
}

#[test]
fn the_seccomp_hook_is_installed_right_before_exec() {
    use backend_namespace::seccomp::{SeccompFilter, SeccompPolicy};
    let fixture = Fixture::new();
    let script = "unshare --user true 2>/dev/null && echo nested-userns-allowed || echo nested-userns-denied";
    // Positive control: without the filter a nested user namespace can be created.
    let (status, out) = run(fixture.request(script));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert_eq!(out, "nested-userns-allowed\n");
    let mut request = fixture.request(script);
    request.seccomp = Some(SeccompFilter::new(&SeccompPolicy::default()).unwrap());
    let (status, out) = run(request);
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert_eq!(out, "nested-userns-denied\n");
}

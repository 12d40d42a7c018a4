//! Integration tests for `spawn`: real namespaces, run as root.
//!
//! Containment: everything happens inside the new namespaces. The only host state
//! the tests touch is what they create (temporary directories, chowned to the
//! unprivileged host id the run maps to). Every spawned run is killed and reaped
//! when its `SpawnedChild` drops, so a failing assertion leaves no process behind.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod common;

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use backend_namespace::spawn::{ChildStage, SpawnError, SpawnedChild, spawn};
use common::{Fixture, HOST_ID, RUN_ID, leftovers_of, members_of, pid_ns, run};
use nix::errno::Errno;
use workspace_core::evidence::ExitStatusRecord;

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
    let new = fixture.workspace().join("new.txt");
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
fn init_forwards_a_stop_signal_to_the_command_and_drops_others() {
    let fixture = Fixture::new();
    // The command traps SIGTERM and SIGUSR1, says so on stdout and exits 3 on TERM.
    let mut request = fixture.request(
        "trap 'echo got-usr1' USR1; trap 'echo got-term; exit 3' TERM; \
         echo ready; while :; do sleep 0.05; done",
    );
    let (read, write) = nix::unistd::pipe().unwrap();
    request.stdout = Some(write);
    let mut child = spawn(&request).unwrap();
    drop(request);
    let killer = child.killer();
    let mut output = std::io::BufReader::new(std::fs::File::from(read));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut output, &mut line).unwrap();
    assert_eq!(line, "ready\n");
    // SIGALRM is not in the list: init drops it (forwarded, it would end the shell).
    killer.signal(nix::libc::SIGALRM).unwrap();
    // SIGUSR1 is: the command's trap runs, and it goes on.
    killer.signal(nix::libc::SIGUSR1).unwrap();
    line.clear();
    std::io::BufRead::read_line(&mut output, &mut line).unwrap();
    assert_eq!(line, "got-usr1\n");
    killer.signal(nix::libc::SIGTERM).unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut output, &mut rest).unwrap();
    assert_eq!(rest, "got-term\n");
    assert_eq!(child.wait().unwrap(), ExitStatusRecord::Code(3));
    assert!(backend_namespace::spawn::FORWARDED_SIGNALS.contains(&nix::libc::SIGTERM));
}

#[test]
fn failures_name_the_stage_and_the_step() {
    let fixture = Fixture::new();

    // A bare name with no absolute PATH entry to look it up in.
    let mut request = fixture.request("true");
    request.argv[0] = "sh".into();
    request.env.retain(|(key, _)| key != "PATH");
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

    // A planted symlink on a mount target's path is refused, not followed:
    // where the target is looked up (a mask) and where it is made (a tmpfs).
    std::os::unix::fs::symlink("/etc", fixture.workspace().join("link")).unwrap();
    for action in [
        workspace_core::mount_plan::MountAction::Mask { file: true },
        workspace_core::mount_plan::MountAction::Tmpfs {
            size_bytes: 1 << 20,
            mode: 0o755,
        },
    ] {
        let mut request = fixture.request("true");
        request
            .plan
            .steps
            .push(workspace_core::mount_plan::MountStep {
                target: "/workspace/link/shadow".into(),
                action,
                reason: workspace_core::mount_plan::Reason::Excluded,
            });
        let last = request.plan.steps.len() - 1;
        let error = spawn(&request).unwrap_err();
        match &error {
            SpawnError::Child {
                stage: ChildStage::MountStep,
                step: Some(step),
                target: Some(target),
                errno,
                ..
            } => {
                assert_eq!(*step, last);
                assert_eq!(target, "/workspace/link/shadow");
                // The link itself, never a directory to go through.
                assert!(matches!(errno, Errno::ENOTDIR | Errno::ELOOP), "{error}");
            }
            other => panic!("{other:?}"),
        }
        assert!(
            error.to_string().contains("/workspace/link/shadow"),
            "{error}"
        );
    }
    assert!(!std::path::Path::new("/etc/shadow").is_dir());

    let mut request = fixture.request("true");
    let missing = fixture.outside().join("missing");
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

/// Adds a bind of the host path `source` at `/mnt/host` and returns its step index.
fn bind_at_mnt_host(request: &mut backend_namespace::spawn::SpawnRequest, source: &Path) -> usize {
    request
        .plan
        .steps
        .push(workspace_core::mount_plan::MountStep {
            target: "/mnt/host".into(),
            action: workspace_core::mount_plan::MountAction::Bind {
                source: source.to_path_buf(),
                read_only: true,
            },
            reason: workspace_core::mount_plan::Reason::Excluded,
        });
    request.plan.steps.len() - 1
}

#[test]
fn a_bind_source_with_a_symlink_anywhere_on_its_path_is_refused() {
    let fixture = Fixture::new();
    // The link at the end of the path, and a link in the middle of it.
    let last_link = fixture.base.path().join("to-outside");
    std::os::unix::fs::symlink(fixture.outside(), &last_link).unwrap();
    let middle_link = fixture.base.path().join("via");
    std::os::unix::fs::symlink(fixture.base.path(), &middle_link).unwrap();
    for source in [last_link.clone(), middle_link.join("outside")] {
        let mut request = fixture.request("cat /mnt/host/sentinel");
        let step = bind_at_mnt_host(&mut request, &source);
        let error = spawn(&request).map(|_| ()).unwrap_err();
        match &error {
            SpawnError::Source {
                step: s,
                target,
                path,
                source: cause,
            } => {
                assert_eq!(*s, step, "{error}");
                assert_eq!(target, "/mnt/host");
                assert_eq!(path, &source);
                assert_eq!(cause.raw_os_error(), Some(Errno::ELOOP as i32), "{error}");
            }
            other => panic!("{source:?}: {other:?}"),
        }
        assert!(
            error.to_string().contains(&format!("step {step}")),
            "{error}"
        );
    }

    // Positive control: the real directory behind the links is bound.
    let mut request = fixture.request("cat /mnt/host/sentinel");
    bind_at_mnt_host(&mut request, &fixture.outside());
    let (status, out) = run(request);
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert_eq!(out, "host only");
}

#[test]
fn an_overlay_layer_with_a_symlink_on_its_path_is_refused() {
    let fixture = Fixture::new();
    let base = fixture.base.path();
    for dir in ["lower", "upper", "work"] {
        std::fs::create_dir(base.join(dir)).unwrap();
    }
    std::os::unix::fs::symlink(fixture.outside(), base.join("lower-link")).unwrap();
    let mut request = fixture.request("true");
    request
        .plan
        .steps
        .push(workspace_core::mount_plan::MountStep {
            target: "/mnt/layered".into(),
            action: workspace_core::mount_plan::MountAction::Overlay {
                lower: base.join("lower-link"),
                upper: base.join("upper"),
                work: base.join("work"),
            },
            reason: workspace_core::mount_plan::Reason::Excluded,
        });
    let step = request.plan.steps.len() - 1;
    match spawn(&request).map(|_| ()).unwrap_err() {
        SpawnError::Source {
            step: s,
            target,
            path,
            source,
        } => {
            assert_eq!(s, step);
            assert_eq!(target, "/mnt/layered");
            assert_eq!(path, base.join("lower-link"));
            assert_eq!(source.raw_os_error(), Some(Errno::ELOOP as i32));
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
    let mut request = fixture.request(script);
    request.danger_no_seccomp = true;
    let (status, out) = run(request);
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert_eq!(out, "nested-userns-allowed\n");
    let mut request = fixture.request(script);
    request.seccomp = Some(SeccompFilter::new(&SeccompPolicy::default()).unwrap());
    let (status, out) = run(request);
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert_eq!(out, "nested-userns-denied\n");
}

#[test]
fn the_default_filter_is_on_unless_explicitly_opted_out() {
    let fixture = Fixture::new();
    let script = "grep '^Seccomp:' /proc/self/status /proc/1/status | cut -d: -f3 | tr -d '\\t' | tr '\\n' ' '; \
                  unshare --user true 2>/dev/null && echo userns-allowed || echo userns-denied";
    // No filter named: the default policy's filter, in the command and in pid 1.
    let (status, out) = run(fixture.request(script));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert_eq!(out, "2 2 userns-denied\n");
    // The explicit opt-out runs without any filter.
    let mut request = fixture.request(script);
    request.danger_no_seccomp = true;
    let (status, out) = run(request);
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert_eq!(out, "0 0 userns-allowed\n");
    // A filter and the opt-out together is a contradiction, refused.
    let mut request = fixture.request("true");
    request.danger_no_seccomp = true;
    request.seccomp =
        Some(backend_namespace::seccomp::SeccompFilter::new(&Default::default()).unwrap());
    assert!(matches!(
        spawn(&request),
        Err(SpawnError::InvalidRequest {
            field: "danger_no_seccomp",
            ..
        })
    ));
}

#[test]
fn pid_1_is_neither_readable_nor_filter_free_even_when_mapped_to_host_root() {
    let fixture = Fixture::new();
    let script = "cat /proc/1/environ >/dev/null 2>&1 && echo environ-readable || echo environ-denied; \
                  (exec 3</proc/1/mem) 2>/dev/null && echo mem-open || echo mem-denied; \
                  (exec 3>/proc/1/mem) 2>/dev/null && echo mem-writable || echo mem-write-denied; \
                  grep '^Seccomp:' /proc/1/status";
    let expected = "environ-denied\nmem-denied\nmem-write-denied\nSeccomp:\t2\n";
    // The usual mapping: the command's uid differs from pid 1's until pid 1 drops.
    let (status, out) = run(fixture.request(script));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert_eq!(out, expected);
    // Root inside mapped to host root: pid 1 and the command share every id, so
    // only pid 1 being non-dumpable keeps its memory (the runner's) out of reach.
    let mut request = fixture.request(script);
    request.uid = 0;
    request.gid = 0;
    request.host_uid = 0;
    request.host_gid = 0;
    request.danger_map_root_to_host_root = true;
    let (status, out) = run(request);
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert_eq!(out, expected);
}

/// A v1 or v2 memory cgroup under this process's own, removed on drop.
struct SmallMemoryCgroup(std::path::PathBuf);

impl SmallMemoryCgroup {
    fn new(limit: &str) -> Option<Self> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let (base, rel, file) = if let Some(line) = own.lines().find(|l| {
            l.split(':')
                .nth(1)
                .is_some_and(|c| c.split(',').any(|c| c == "memory"))
        }) {
            (
                "/sys/fs/cgroup/memory",
                line.splitn(3, ':').nth(2)?,
                "memory.limit_in_bytes",
            )
        } else {
            let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?;
            ("/sys/fs/cgroup", rel, "memory.max")
        };
        let dir = Path::new(base)
            .join(rel.trim_start_matches('/'))
            .join(format!("spawn-oom-{}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        let me = Self(dir);
        std::fs::write(me.0.join(file), limit).ok()?;
        Some(me)
    }
}

impl Drop for SmallMemoryCgroup {
    fn drop(&mut self) {
        for _ in 0..100 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn an_init_killed_during_setup_is_a_failure_not_a_started_command() {
    let cgroup = SmallMemoryCgroup::new("4096").expect(
        "this test needs root and a writable memory controller (v1 /sys/fs/cgroup/memory, or v2 memory.max)",
    );
    let fixture = Fixture::new();
    let mut request = fixture.request("echo started");
    request.cgroups = vec![cgroup.0.clone()];
    // pid 1 joins the cgroup first thing after the go byte; its next page faults
    // exceed the limit and the OOM killer ends it before it forks the command (or
    // a kernel allocation fails and it reports that). Either way: no Ok.
    match spawn(&request) {
        Err(SpawnError::InitEnded { .. } | SpawnError::Child { .. }) => {}
        Ok(mut child) => panic!("reported as started: {:?}", child.wait()),
        Err(other) => panic!("{other:?}"),
    }
}

/// A frozen cgroup made by this test (the v1 freezer where it is mounted,
/// else a v2 group with `cgroup.freeze`); thawed and removed on drop.
struct FrozenCgroup {
    dir: std::path::PathBuf,
    /// The v1 freezer: a frozen task there keeps even `SIGKILL` pending.
    v1: bool,
}

impl FrozenCgroup {
    fn new() -> Self {
        let v1_root = Path::new("/sys/fs/cgroup/freezer");
        let v1 = v1_root.join("freezer.state").exists() || v1_root.join("cgroup.procs").exists();
        let parent = if v1 {
            v1_root.to_path_buf()
        } else {
            let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
            let rel = own
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .expect("this test needs the v1 freezer or a cgroup v2 hierarchy");
            Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/'))
        };
        let dir = parent.join(format!(
            "agent-workspace-test-{}-frozen",
            std::process::id()
        ));
        std::fs::create_dir(&dir)
            .unwrap_or_else(|e| panic!("creating the freezer cgroup {}: {e}", dir.display()));
        let me = Self { dir, v1 };
        me.set(true);
        me
    }

    fn set(&self, frozen: bool) {
        let (file, value) = match (self.v1, frozen) {
            (true, true) => ("freezer.state", "FROZEN"),
            (true, false) => ("freezer.state", "THAWED"),
            (false, true) => ("cgroup.freeze", "1"),
            (false, false) => ("cgroup.freeze", "0"),
        };
        std::fs::write(self.dir.join(file), value)
            .unwrap_or_else(|e| panic!("writing {value} to {file}: {e}"));
    }

    fn procs(&self) -> Vec<u32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    fn thaw(&self) {
        self.set(false);
    }
}

impl Drop for FrozenCgroup {
    fn drop(&mut self) {
        let file = if self.v1 {
            "freezer.state"
        } else {
            "cgroup.freeze"
        };
        let _ = std::fs::write(self.dir.join(file), if self.v1 { "THAWED" } else { "0" });
        for _ in 0..250 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("could not remove the test cgroup {}", self.dir.display());
    }
}

#[test]
fn a_setup_stuck_in_a_frozen_cgroup_times_out_and_the_child_is_killed() {
    let frozen = FrozenCgroup::new();
    let fixture = Fixture::new();
    let mut request = fixture.request("echo started");
    // pid 1 joins the frozen group first thing after the go byte and freezes there.
    request.cgroups = vec![frozen.dir.clone()];
    request.setup_timeout = Duration::from_millis(500);
    let start = Instant::now();
    match spawn(&request) {
        Err(SpawnError::SetupTimeout { after_ms: 500 }) => {}
        Ok(mut child) => panic!("reported as started: {:?}", child.wait()),
        Err(other) => panic!("{other:?}"),
    }
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(500) && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
    // The frozen init is still there in a v1 group (SIGKILL stays pending
    // there; v2's freezer lets it through); once thawed it dies and leaves the
    // group.
    if frozen.v1 {
        let stuck = frozen.procs();
        assert_eq!(stuck.len(), 1, "{stuck:?}");
    }
    frozen.thaw();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !frozen.procs().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the killed child is still in the group: {:?}",
            frozen.procs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // The default is 30 s; zero is refused.
    assert_eq!(
        fixture.request("true").setup_timeout,
        Duration::from_secs(30)
    );
    let mut request = fixture.request("true");
    request.setup_timeout = Duration::ZERO;
    assert!(matches!(
        spawn(&request),
        Err(SpawnError::InvalidRequest {
            field: "setup_timeout",
            ..
        })
    ));
}

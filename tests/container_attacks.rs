//! The attack catalogue's process, privilege, network and limit rows against the
//! container backend, through the runner with runc: each attack fails inside the
//! workspace *and* the host is unchanged (its file, its process, its listener,
//! its hostname). The filesystem escapes (`/proc/*/root`, planted symbolic and
//! hard links, `..`) are the conformance kit's cases, which
//! `tests/conformance.rs` runs on this backend too.
//!
//! Containment: every attack targets only what its test made (a temporary host
//! file, a `sleep` it started, a listener it bound on a free port).
//!
//! Needs root, user namespaces, cgroups and runc (Debian package runc).
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod support;

use std::net::TcpListener;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::PermissionsExt;

use support::Fixture;
use support::container::{create, runner, sh};
use workspace_core::boundary::KillCause;
use workspace_core::contract::ByteSize;
use workspace_core::runner::Workspace;

async fn finish(fixture: &Fixture, workspace: Workspace) {
    let run_id = workspace.run_id().clone();
    let report = workspace.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    // What the whole container used, read before it was deleted.
    assert!(
        report.outcome.usage.cpu_time_us.unwrap_or(0) > 0,
        "{:?}",
        report.outcome.usage
    );
    fixture.assert_nothing_left(&run_id, &[]);
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_can_neither_signal_a_host_process_or_its_own_pid_1_nor_change_the_hosts_name()
{
    let fixture = Fixture::new("container-attack-process");
    let runner = runner(&fixture);
    let mut victim = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    let pid = victim.id();
    let host_name = hostname();
    let mut workspace = create(&runner, fixture.contract()).await;

    // The positive control: a process of the workspace can be signalled.
    let (ended, _) = sh(&fixture, &mut workspace, "sleep 60 & kill -9 $!").await;
    assert_eq!(ended.shell_status(), 0, "{ended:?}");
    for signal in ["KILL", "TERM", "STOP"] {
        let (ended, _) = sh(&fixture, &mut workspace, &format!("kill -{signal} {pid}")).await;
        assert_ne!(
            ended.shell_status(),
            0,
            "kill -{signal} of a host pid succeeded"
        );
    }
    let (ended, out) = sh(
        &fixture,
        &mut workspace,
        &format!("test -e /proc/{pid} || echo unseen"),
    )
    .await;
    assert_eq!((ended.shell_status(), out.trim()), (0, "unseen"));
    // The container's pid 1 (its root, another uid) neither takes a signal nor
    // shows what it holds; the container lives on.
    for attack in ["kill -TERM 1", "kill -KILL 1", "ls /proc/1/fd"] {
        let (ended, _) = sh(&fixture, &mut workspace, attack).await;
        assert_ne!(ended.shell_status(), 0, "{attack} succeeded");
    }
    let (ended, _) = sh(&fixture, &mut workspace, "true").await;
    assert_eq!(ended.shell_status(), 0, "the container ended: {ended:?}");
    let (ended, _) = sh(&fixture, &mut workspace, "hostname attacker").await;
    assert_ne!(ended.shell_status(), 0, "hostname changed inside");
    let (ended, _) = sh(
        &fixture,
        &mut workspace,
        "echo attacker > /proc/sys/kernel/hostname",
    )
    .await;
    assert_ne!(ended.shell_status(), 0);

    assert!(
        victim.try_wait().unwrap().is_none(),
        "the host process was ended"
    );
    assert_eq!(hostname(), host_name, "the host's name changed");
    finish(&fixture, workspace).await;
    victim.kill().unwrap();
    victim.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_cannot_mount_gain_privileges_or_reach_the_hosts_loopback() {
    let fixture = Fixture::new("container-attack-privileges");
    let runner = runner(&fixture);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut workspace = create(&runner, fixture.contract()).await;

    // A setuid-root program planted in the workspace from the host.
    let checkout = checkout_of(&fixture, &workspace);
    let planted = checkout.join("suid-id");
    std::fs::copy("/usr/bin/id", &planted).unwrap();
    std::os::unix::fs::chown(&planted, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let (ended, out) = sh(&fixture, &mut workspace, "./suid-id -u").await;
    assert_eq!(ended.shell_status(), 0, "{ended:?}");
    assert_ne!(out.trim(), "0", "a setuid-root program gave root");

    for attack in [
        "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m",
        "mount --bind /tmp /workspace",
        "unshare -m true",
        "unshare -U true",
        "unshare -n true",
        "mknod /tmp/dev c 1 3",
        "chown 0 /tmp",
    ] {
        let (ended, _) = sh(&fixture, &mut workspace, attack).await;
        assert_ne!(ended.shell_status(), 0, "{attack} succeeded");
    }
    let (ended, out) = sh(
        &fixture,
        &mut workspace,
        "grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status",
    )
    .await;
    assert_eq!(ended.shell_status(), 0);
    assert!(
        out.contains("CapEff:\t0000000000000000")
            && out.contains("CapBnd:\t0000000000000000")
            && out.contains("NoNewPrivs:\t1"),
        "{out}"
    );

    // The host's loopback listener: nothing inside reaches it.
    let script = format!(
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)\""
    );
    let (ended, _) = sh(&fixture, &mut workspace, &script).await;
    assert_ne!(
        ended.shell_status(),
        0,
        "the host's loopback listener was reached"
    );
    assert!(
        listener.accept().is_err(),
        "the host's listener saw a connection"
    );
    finish(&fixture, workspace).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_and_a_memory_bomb_stop_at_the_containers_limits() {
    let fixture = Fixture::new("container-attack-limits");
    let runner = runner(&fixture);
    let mut contract = fixture.contract();
    contract.environment.limits.pids = Some(32);
    contract.environment.limits.memory = Some(ByteSize(64 << 20));
    let mut workspace = create(&runner, contract).await;

    // The positive controls: a few processes and 8 MiB fit.
    let (ended, _) = sh(&fixture, &mut workspace, "sleep 0.1 & sleep 0.1 & wait").await;
    assert_eq!(ended.shell_status(), 0, "{ended:?}");
    let small = "python3 -c \"b = b'x' * (8 << 20); print(len(b))\"";
    let (ended, out) = sh(&fixture, &mut workspace, small).await;
    assert_eq!(
        (ended.shell_status(), out.trim()),
        (0, "8388608"),
        "{ended:?}"
    );
    // What it used, read from its own cgroup.
    let peak = ended.exit.usage.peak_memory_bytes.unwrap_or(0);
    assert!(
        (8 << 20..64 << 20).contains(&peak),
        "peak memory {peak}: {ended:?}"
    );
    assert!(ended.exit.usage.cpu_time_us.unwrap_or(0) > 0, "{ended:?}");

    let bomb = "python3 -c \"b = b'x' * (300 << 20); print('allocated')\"";
    let (ended, out) = sh(&fixture, &mut workspace, bomb).await;
    assert!(!out.contains("allocated"), "{out}");
    assert_ne!(ended.shell_status(), 0, "{ended:?}");
    assert_eq!(ended.exit.killed, Some(KillCause::MemoryLimit), "{ended:?}");
    let (ended, out) = sh(
        &fixture,
        &mut workspace,
        // Counted with builtins only: no fork is left to count with.
        // The bomb in a subshell, which dies at its first refused fork.
        "(i=0; while [ $i -lt 200 ]; do sleep 5 & i=$((i+1)); done) 2>/dev/null; \
         set -- /proc/[0-9]*; echo $#",
    )
    .await;
    let running: u32 = out.trim().parse().unwrap_or_else(|_| panic!("{out:?}"));
    assert!(
        (2..=32).contains(&running),
        "{running} processes under a limit of 32"
    );
    // Its own cgroup's high-water mark says the same (the refused forks are
    // counted where the container's limit is, which commands share).
    let peak = ended.exit.usage.peak_pids.unwrap_or(0);
    assert!((2..=32).contains(&peak), "peak processes {peak}: {ended:?}");

    // The host can still fork.
    assert!(
        std::process::Command::new("true")
            .status()
            .unwrap()
            .success()
    );
    finish(&fixture, workspace).await;
}

/// The host directory of a sealed workspace's checkout.
fn checkout_of(fixture: &Fixture, workspace: &Workspace) -> std::path::PathBuf {
    let source: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            fixture
                .paths(workspace.run_id())
                .evidence
                .join("source.json"),
        )
        .unwrap(),
    )
    .unwrap();
    std::path::PathBuf::from(source["workspace"].as_str().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_can_neither_write_the_base_system_nor_see_the_hosts_interfaces_cgroups_homes_or_sockets()
 {
    let fixture = Fixture::new("container-attack-host");
    let runner = runner(&fixture);
    // A host abstract socket and a host TCP port, both the test's own.
    let abstract_name = format!("aw-container-attack-{}", std::process::id());
    let address =
        std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
    let unix = std::os::unix::net::UnixListener::bind_addr(&address).unwrap();
    unix.set_nonblocking(true).unwrap();
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let usr_before = std::fs::read_dir("/usr").unwrap().count();
    let mut workspace = create(&runner, fixture.contract()).await;

    for attack in [
        "touch /usr/aw-planted",
        "mkdir /usr/aw-planted-dir",
        "touch /bin/aw-planted",
        "touch /sys/kernel/aw-planted",
        "mkdir /sys/fs/cgroup/aw-planted",
        "echo $$ > /sys/fs/cgroup/cgroup.procs",
        "ulimit -Hn 1000000",
    ] {
        let (ended, _) = sh(&fixture, &mut workspace, attack).await;
        assert_ne!(ended.shell_status(), 0, "{attack} succeeded");
    }
    // Nothing of the host's networks, cgroups or homes is to be seen.
    let (ended, out) = sh(
        &fixture,
        &mut workspace,
        "ls /sys/class/net; grep -c : /proc/net/dev; ls /sys/fs/cgroup | wc -l; \
         ls -A /home; test -e /root/.ssh && echo ssh; true",
    )
    .await;
    assert_eq!(ended.shell_status(), 0, "{ended:?}");
    // `/home` holds the run's own home (a tmpfs of its own), not the host's homes.
    assert_eq!(
        out, "lo\n1\n0\nagent\n",
        "host interfaces, cgroups or homes seen"
    );
    // The host's abstract socket is the host network namespace's.
    let script = format!(
        "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('\\0{abstract_name}')\""
    );
    let (ended, _) = sh(&fixture, &mut workspace, &script).await;
    assert_ne!(
        ended.shell_status(),
        0,
        "the host's abstract socket was reached"
    );
    assert!(
        unix.accept().is_err(),
        "the host's abstract socket saw a connection"
    );
    // The port the host holds is free in the container's own network.
    let script = format!(
        "python3 -c \"import socket; s = socket.socket(); s.bind(('127.0.0.1', {port})); print('bound')\""
    );
    let (ended, out) = sh(&fixture, &mut workspace, &script).await;
    assert_eq!(
        (ended.shell_status(), out.trim()),
        (0, "bound"),
        "{ended:?}"
    );

    finish(&fixture, workspace).await;
    assert!(!std::path::Path::new("/usr/aw-planted").exists());
    assert_eq!(std::fs::read_dir("/usr").unwrap().count(), usr_before);
    assert_eq!(
        held.local_addr().unwrap().port(),
        port,
        "the host's port moved"
    );
}

/// Late output cannot be erased in a container either: the background
/// process's truncations, seeks and writes at offset 0 fail on the pipe the
/// output keeper reads, every byte it wrote is in `late.stdout` and
/// `late.stderr`, the command's own truncation loses nothing of its stream,
/// and nothing of the run is left (no container, cgroup, run directory or
/// process).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_output_survives_a_process_that_truncates_or_overwrites_its_descriptor() {
    support::eraser::require_python();
    let fixture = Fixture::new("container-late-erased");
    let runner = runner(&fixture);
    let mark = support::marker("container-late-erased");
    let workspace = create(&runner, fixture.contract()).await;
    let run_id = workspace.run_id().clone();
    let io = workspace_core::runner::CommandIo::captured;
    let ran = workspace
        .exec(&support::eraser::first_command(&mark), io())
        .await
        .unwrap();
    assert!(ran.succeeded(), "{ran:?}");
    let said = workspace
        .exec(&support::eraser::second_command(&mark), io())
        .await
        .unwrap();
    assert!(said.succeeded(), "{said:?}");
    let report = workspace.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    support::eraser::assert_nothing_erased(&report.evidence);
    assert!(support::container::runc_knows(&support::container::state(&fixture)).is_empty());
    fixture.assert_nothing_left(&run_id, &[&mark]);
}

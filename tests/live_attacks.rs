//! Attacks on a live workspace's process boundary, through the command line, each
//! checked on the host afterwards: a process of the workspace cannot move itself
//! out of the workspace's cgroup, a double-forked, `setsid` daemon does not
//! outlive `destroy`, and a runner SIGKILLed while the workspace runs a service
//! and publishes a port is ended by `recover` with no process, cgroup, run
//! directory or listener left. Every process the tests start carries a marker
//! of its own; nothing else on the host is touched.
//!
//! Needs root, user namespaces and cgroups (as every namespace-backend test).
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use support::cli::{CliFixture, text};
use support::{marker, processes_with, wait_for_process, wait_until_gone};

/// A contract publishing port 8000 with one service (carrying `mark`).
fn contract(fixture: &CliFixture, mark: &str) -> std::path::PathBuf {
    assert!(
        std::path::Path::new("/usr/bin/python3").exists(),
        "the service of this test needs python3 (Debian package python3)"
    );
    let path = fixture.path().join("live.toml");
    std::fs::write(
        &path,
        format!(
            r#"
objective = "attacks on a live workspace"
shape = "narrow-fix"
[source]
repo = "."
revision = "HEAD"
[filesystem]
writable = ["."]
[process]
ports = [8000]
[[environment.services]]
name = "held"
# One process that never forks (a shell's loop would, and until its child
# execs, that child carries the marker too).
command = ["python3", "-c", "import time; print('up', flush=True); time.sleep(1000)", "{mark}"]
health = {{ log = "up" }}
"#
        ),
    )
    .unwrap();
    path
}

/// The cgroup paths of `pid` (host view), one per hierarchy.
fn cgroups_of(pid: u32) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.splitn(3, ':').nth(2).map(str::to_owned))
        .collect()
}

#[test]
fn a_process_cannot_leave_the_workspace_cgroup_nor_outlive_destroy() {
    let fixture = CliFixture::new("live-escape");
    let service = marker("escape-service");
    let contract = contract(&fixture, &service);
    let run = fixture.create(Some(&contract));

    let daemon = marker("escape-daemon");
    // Try every cgroup.procs the workspace can see (and a new group), then leave
    // a daemon behind: double fork, new session, stdio closed.
    let script = format!(
        "for f in $(find /sys/fs/cgroup -name cgroup.procs 2>/dev/null); do echo $$ > $f 2>/dev/null && echo moved $f; done; \
         mkdir /sys/fs/cgroup/escape 2>/dev/null && echo made a group; \
         (setsid sh -c 'while :; do sleep 0.1; done' {daemon} </dev/null >/dev/null 2>&1 &) ; \
         sleep 0.2; echo done"
    );
    let out = fixture.agent_workspace(&["exec", &run, "--", "sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "done\n", "no cgroup write succeeded");
    assert!(wait_for_process(&daemon, Duration::from_secs(5)));
    for pid in processes_with(&daemon)
        .into_iter()
        .chain(processes_with(&service))
    {
        let groups = cgroups_of(pid);
        assert!(!groups.is_empty(), "pid {pid} has no cgroups");
        for group in groups.iter().filter(|g| !g.is_empty() && *g != "/") {
            assert!(
                group.contains(&format!("/{run}/")),
                "pid {pid} is in {group}, outside the workspace's cgroup"
            );
        }
    }

    let out = fixture.agent_workspace(&["destroy", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for mark in [&daemon, &service] {
        assert_eq!(
            wait_until_gone(mark, Duration::from_secs(5)),
            Vec::<u32>::new(),
            "a process outlived destroy"
        );
    }
}

/// The preview endpoints in a run's `observed.json`.
fn endpoints(fixture: &CliFixture, run: &str) -> Vec<SocketAddr> {
    let observed = fixture
        .state_home()
        .join("agent-workspace/evidence")
        .join(run)
        .join("observed.json");
    let observed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(observed).unwrap_or_default()).unwrap_or_default();
    observed["probe"]["previews"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["host"].as_str()?.parse().ok())
        .collect()
}

#[test]
fn a_sigkilled_runner_with_a_service_and_a_port_is_recovered_leaving_nothing() {
    let fixture = CliFixture::new("live-sigkill");
    let service = marker("sigkill-service");
    let command = marker("sigkill-command");
    let contract = contract(&fixture, &service);
    let repo = fixture.repo();
    let mut runner = fixture
        .command()
        .args(["run", "--contract", contract.to_str().unwrap()])
        .args(["--repo", repo.to_str().unwrap(), "--"])
        .args(["sh", "-c", "while :; do sleep 0.1; done", &command])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The runner's own command line holds the marker too: wait for the
    // command in a cgroup of the run.
    let deadline = Instant::now() + Duration::from_secs(30);
    let run = loop {
        let listing = fixture.agent_workspace(&["ls", "--json"]);
        let rows: serde_json::Value = serde_json::from_slice(&listing.stdout).unwrap_or_default();
        if let Some(run) = rows[0]["run_id"].as_str()
            && support::runs_in(&command, run)
        {
            break run.to_owned();
        }
        assert!(Instant::now() < deadline, "the run's command never started");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(wait_for_process(&service, Duration::from_secs(5)));
    let published = endpoints(&fixture, &run);
    assert_eq!(
        published.len(),
        1,
        "port 8000 is published: {}",
        support::list_tree(fixture.path()).join("\n")
    );
    assert!(TcpStream::connect_timeout(&published[0], Duration::from_secs(2)).is_ok());

    runner.kill().unwrap();
    runner.wait().unwrap();
    // The runner is gone; its workspace still runs until recovered.
    assert_eq!(processes_with(&service).len(), 1);
    let out = fixture.agent_workspace(&["recover"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for mark in [&service, &command] {
        assert_eq!(
            wait_until_gone(mark, Duration::from_secs(5)),
            Vec::<u32>::new(),
            "a process outlived recovery"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect_timeout(&published[0], Duration::from_millis(200)).is_ok() {
        assert!(
            Instant::now() < deadline,
            "the preview endpoint {} outlived recovery",
            published[0]
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let run_dir = fixture.runtime().join("runs").join(&run);
    assert!(!run_dir.exists(), "the run directory remains");
    // Dropping the fixture fails the test when a cgroup of the run remains.
}

//! Network attacks: the run has its own network namespace with `lo` only.

use std::io::ErrorKind;
use std::net::TcpListener;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};

use workspace_core::evidence::ExitStatusRecord;

use crate::common::run;
use crate::support::{LiveRun, attack_fixture, probe_lines, probe_request, unique, with_probe};

/// `ECONNREFUSED`.
const ECONNREFUSED: i32 = 111;
/// `ENOENT`.
const ENOENT: i32 = 2;

fn assert_no_connection<T>(accepted: std::io::Result<T>, what: &str) {
    match accepted {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        Err(e) => panic!("{what}: accept failed: {e}"),
        Ok(_) => panic!("{what}: the host listener accepted a connection from the run"),
    }
}

#[test]
fn connect_to_a_host_tcp_listener() {
    let mut fixture = attack_fixture();
    with_probe(&mut fixture);
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    host.set_nonblocking(true).unwrap();
    let port = host.local_addr().unwrap().port();
    let (status, out) = run(probe_request(&fixture, "tcp-connect", &port.to_string()));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    let lines = probe_lines(&out);
    // Positive control: loopback inside works (so `lo` is up).
    assert!(lines.contains(&"own-loopback=ok"), "{out}");
    assert!(
        lines.contains(&format!("host-port=err {ECONNREFUSED}").as_str()),
        "{out}"
    );
    assert_no_connection(host.accept(), "tcp");
}

#[test]
fn connect_to_a_host_abstract_unix_socket() {
    let mut fixture = attack_fixture();
    with_probe(&mut fixture);
    let name = unique("abstract");
    let host = UnixListener::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
    host.set_nonblocking(true).unwrap();
    let (status, out) = run(probe_request(&fixture, "abstract-connect", &name));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    let lines = probe_lines(&out);
    assert!(lines.contains(&"own-abstract=ok"), "{out}");
    assert!(
        lines.contains(&format!("host-abstract=err {ECONNREFUSED}").as_str()),
        "{out}"
    );
    assert_no_connection(host.accept(), "abstract socket");
}

/// A unix socket on the host's file system (as `/run/docker.sock` would be): the
/// path does not exist in the run's mount namespace.
#[test]
fn connect_to_a_host_path_unix_socket() {
    let mut fixture = attack_fixture();
    with_probe(&mut fixture);
    let path = fixture.outside().join("host.sock");
    let host = UnixListener::bind(&path).unwrap();
    host.set_nonblocking(true).unwrap();
    let (status, out) = run(probe_request(
        &fixture,
        "path-connect",
        &path.to_string_lossy(),
    ));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    let lines = probe_lines(&out);
    assert!(lines.contains(&"own-path=ok"), "{out}");
    assert!(
        lines.contains(&format!("host-path=err {ENOENT}").as_str()),
        "{out}"
    );
    assert_no_connection(host.accept(), "path socket");
}

/// Only `lo` exists in the run's network namespace, and it is up (the loopback
/// connect in `connect_to_a_host_tcp_listener` is the control that it works).
#[test]
fn enumerate_host_interfaces_via_proc_net_and_netlink() {
    let fixture = attack_fixture();
    let (status, out) = run(fixture.request(
        "echo proc=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ,); \
         echo route=$(tail -n +2 /proc/net/route | wc -l); \
         ip -o link show | cut -d' ' -f2-3",
    ));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(out.contains("proc=lo,\n"), "{out}");
    assert!(out.contains("route=0\n"), "a route inside: {out}");
    let links: Vec<&str> = out.lines().filter(|l| l.contains(": <")).collect();
    assert_eq!(links.len(), 1, "{out}");
    assert!(
        links[0].starts_with("lo: <") && links[0].contains(",UP"),
        "{out}"
    );
}

/// `/sys` is the host's sysfs bound read-only, and sysfs shows the network devices
/// of the namespace that mounted it: the host's interfaces (names, addresses,
/// counters) are listed in `/sys/class/net`.
#[test]
fn enumerate_host_interfaces_via_sys_class_net() {
    let fixture = attack_fixture();
    let (status, out) = run(fixture.request(
        "ls /sys/class >/dev/null && echo CONTROL-OK; \
         echo sys=$(ls /sys/class/net | tr '\\n' ,)",
    ));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(out.contains("CONTROL-OK"), "{out}");
    assert!(
        out.contains("sys=lo,\n"),
        "/sys/class/net lists the host's interfaces (the host's sysfs is bound): {out}"
    );
}

/// Two runs bind the same port at the same time, while the host holds it too: each
/// run has a network namespace of its own.
#[test]
fn two_runs_bind_the_same_port() {
    let mut fixture = attack_fixture();
    with_probe(&mut fixture);
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    host.set_nonblocking(true).unwrap();
    let port = host.local_addr().unwrap().port().to_string();
    let mut runs = Vec::new();
    let mut releases = Vec::new();
    for _ in 0..2 {
        let (stdin_read, stdin_write) = nix::unistd::pipe().unwrap();
        let mut request = probe_request(&fixture, "tcp-hold-stdin", &port);
        request.stdin = Some(stdin_read);
        let mut live = LiveRun::start(request);
        live.wait_for("probe: bound=");
        runs.push(live);
        releases.push(stdin_write);
    }
    // Both hold the port now (the first is still waiting on its stdin).
    for live in &runs {
        assert!(live.output.contains("probe: bound=ok"), "{}", live.output);
    }
    drop(releases);
    for mut live in runs {
        assert_eq!(live.child.wait().unwrap(), ExitStatusRecord::Code(0));
    }
    assert_no_connection(host.accept(), "same port");
}

//! Leases between OS processes. The child is this very test binary, re-executed with
//! [`ROLE`] set in its environment: [`main`] then runs [`child_process`] only.
//!
//! A test binary of its own (`harness = false`, see [`harness`]): [`main`] runs the
//! cases one at a time, in order, and reports them as libtest does. A child forked
//! while another test of the same binary drops a file lock shares that lock's open
//! file description until it calls `exec`, so lock-release assertions elsewhere could
//! see it for a moment; here no other test runs while a case forks.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod harness;

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use std::hash::{BuildHasher, RandomState};
use std::net::{Ipv4Addr, TcpListener};
use std::ops::RangeInclusive;
use std::sync::Mutex;
use tempfile::TempDir;

use workspace_core::lease::{LeaseError, LeaseKind, Leases, NameKind, PortLease};

use harness::ReExecChild;

const ROLE: &str = "AGENT_WORKSPACE_LEASE_TEST_ROLE";
const DIR: &str = "AGENT_WORKSPACE_LEASE_TEST_DIR";
const PORTS: &str = "AGENT_WORKSPACE_LEASE_TEST_PORTS";
/// Prefix of the child's protocol lines (anything else on its stdout is ignored).
const MARK: &str = "AWLEASE ";
const CACHE_NAME: &str = "killed-cache";
const SCHEMA_NAME: &str = "killed_schema";

/// This binary again, as the child of role `role` leasing from `dir` and `ports`.
fn spawn_child(role: &str, dir: &Path, ports: &RangeInclusive<u16>) -> ReExecChild {
    ReExecChild::spawn(
        (ROLE, role),
        [
            (DIR, dir.display().to_string()),
            (PORTS, format!("{}-{}", ports.start(), ports.end())),
        ],
        MARK,
    )
}

fn main() -> ExitCode {
    if let Ok(role) = std::env::var(ROLE) {
        child_process(&role);
        return ExitCode::SUCCESS;
    }
    harness::run(harness::cases![
        two_processes_lease_distinct_ports,
        leases_of_a_killed_process_are_reclaimed,
    ])
}

/// Child side. Roles: `ports` leases 5 ports from the range; `port_and_names` leases
/// the range's first port exactly plus [`CACHE_NAME`] and [`SCHEMA_NAME`]. Both report
/// `ready`, wait for `go` on stdin, lease, report, then hold until stdin closes. A
/// failure panics, so the child exits unsuccessfully.
fn child_process(role: &str) {
    let dir = PathBuf::from(std::env::var(DIR).unwrap());
    let ports = std::env::var(PORTS).unwrap();
    let (start, end) = ports.split_once('-').unwrap();
    let range = start.parse().unwrap()..=end.parse().unwrap();
    let leases = Leases::open(&dir, range.clone()).unwrap();
    say("ready");
    let mut stdin = std::io::stdin().lock();
    let mut line = String::new();
    stdin.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "go");

    let mut ports = Vec::new();
    let mut names = Vec::new();
    match role {
        "ports" => {
            for _ in 0..5 {
                let lease = leases.lease_port("child").unwrap();
                say(&format!("port {}", lease.port()));
                ports.push(lease);
            }
        }
        "port_and_names" => {
            ports.push(leases.lease_port_exact(*range.start(), "child").unwrap());
            names.push(
                leases
                    .lease_name(NameKind::CachePrefix, CACHE_NAME, "child")
                    .unwrap(),
            );
            names.push(
                leases
                    .lease_name(NameKind::Schema, SCHEMA_NAME, "child")
                    .unwrap(),
            );
        }
        other => panic!("unknown role {other}"),
    }
    say("holding");
    // Hold until the parent closes stdin (or kills us).
    while stdin.read_line(&mut line).is_ok_and(|n| n > 0) {}
    drop((ports, names));
}

fn say(message: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{MARK}{message}").unwrap();
    out.flush().unwrap();
}

fn two_processes_lease_distinct_ports() {
    let dir = TempDir::new().unwrap();
    let range = port_range(10);
    let leases = Leases::open(dir.path(), range.clone()).unwrap();
    let mut child = spawn_child("ports", dir.path(), &range);
    child.expect("ready");

    // Both processes lease at the same moment.
    child.send("go");
    let mine: Vec<PortLease> = (0..5)
        .map(|_| leases.lease_port("parent").unwrap())
        .collect();
    let theirs: Vec<u16> = (0..5)
        .map(|_| {
            let line = child.next_line("port N");
            line.strip_prefix("port ").unwrap().parse().unwrap()
        })
        .collect();
    child.expect("holding");

    let all: BTreeSet<u16> = mine
        .iter()
        .map(PortLease::port)
        .chain(theirs.iter().copied())
        .collect();
    assert_eq!(
        all.len(),
        10,
        "duplicate port: parent {mine:?}, child {theirs:?}"
    );
    assert_eq!(all, range.clone().collect::<BTreeSet<u16>>());
    assert!(matches!(
        leases.lease_port("eleventh"),
        Err(LeaseError::Exhausted {
            kind: LeaseKind::Port,
            ..
        })
    ));

    // Both processes' leases are listed with their pids.
    let child_pid = child.pid();
    let holders = leases.holders().unwrap();
    assert_eq!(holders.len(), 10);
    for info in &holders {
        let port: u16 = info.name.parse().unwrap();
        let pid = info.holder.as_ref().map(|h| h.pid);
        let expected = if theirs.contains(&port) {
            child_pid
        } else {
            std::process::id()
        };
        assert_eq!(pid, Some(expected), "port {port}");
    }

    child.finish();
    // The child's ports are free again; ours are still held.
    let freed: BTreeSet<u16> = (0..5)
        .map(|_| leases.lease_port("after").unwrap().port())
        .collect();
    assert_eq!(freed.len(), 1, "dropped leases are reused, lowest first");
    let reheld: Vec<PortLease> = (0..5)
        .map(|_| leases.lease_port("after").unwrap())
        .collect();
    assert_eq!(
        reheld
            .iter()
            .map(PortLease::port)
            .collect::<BTreeSet<u16>>(),
        theirs.iter().copied().collect()
    );
}

fn leases_of_a_killed_process_are_reclaimed() {
    let dir = TempDir::new().unwrap();
    let range = port_range(1);
    let port = *range.start();
    let leases = Leases::open(dir.path(), range.clone()).unwrap();
    let mut child = spawn_child("port_and_names", dir.path(), &range);
    child.expect("ready");
    child.send("go");
    child.expect("holding");
    let child_pid = child.pid();

    let listed: Vec<(LeaseKind, String, Option<u32>)> = leases
        .holders()
        .unwrap()
        .into_iter()
        .map(|i| (i.kind, i.name, i.holder.map(|h| h.pid)))
        .collect();
    assert_eq!(
        listed,
        [
            (LeaseKind::Port, port.to_string(), Some(child_pid)),
            (
                LeaseKind::CachePrefix,
                CACHE_NAME.to_string(),
                Some(child_pid)
            ),
            (LeaseKind::Schema, SCHEMA_NAME.to_string(), Some(child_pid)),
        ]
    );
    match leases.lease_port_exact(port, "parent") {
        Err(LeaseError::Taken {
            holder: Some(info), ..
        }) => {
            assert_eq!((info.pid, info.holder.as_str()), (child_pid, "child"));
        }
        other => panic!("expected Taken by the child, got {other:?}"),
    }
    for (kind, name) in [
        (NameKind::CachePrefix, CACHE_NAME),
        (NameKind::Schema, SCHEMA_NAME),
    ] {
        assert!(matches!(
            leases.lease_name(kind, name, "parent"),
            Err(LeaseError::Taken { holder: Some(ref info), .. }) if info.pid == child_pid
        ));
    }

    // SIGKILL: the child runs no cleanup at all; the kernel drops its locks.
    let status = child.kill();
    assert!(!status.success());

    let reclaimed = leases.lease_port_exact(port, "parent").unwrap();
    let cache = leases
        .lease_name(NameKind::CachePrefix, CACHE_NAME, "parent")
        .unwrap();
    let schema = leases
        .lease_name(NameKind::Schema, SCHEMA_NAME, "parent")
        .unwrap();
    assert_eq!(
        (reclaimed.port(), cache.name(), schema.name()),
        (port, CACHE_NAME, SCHEMA_NAME)
    );
    let holders = leases.holders().unwrap();
    assert_eq!(holders.len(), 3);
    assert!(holders.iter().all(|i| {
        i.holder
            .as_ref()
            .is_some_and(|h| h.pid == std::process::id())
    }));
    drop(child);
}

/// A random number (std's randomly keyed hasher; no extra dependency).
fn random_u64() -> u64 {
    RandomState::new().hash_one(std::process::id())
}

/// `len` consecutive ports, exclusive to the calling test within this process, all
/// bindable on 127.0.0.1 right now.
fn port_range(len: u16) -> RangeInclusive<u16> {
    static NEXT: Mutex<Option<u16>> = Mutex::new(None);
    let mut next = NEXT.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..200 {
        let start = match *next {
            Some(start) if start < 32_000 => start,
            _ => 20_000 + u16::try_from(random_u64() % 10_000).unwrap(),
        };
        let range = start..=start + len - 1;
        *next = Some(start + len);
        let listeners: Result<Vec<TcpListener>, _> = range
            .clone()
            .map(|port| TcpListener::bind((Ipv4Addr::LOCALHOST, port)))
            .collect();
        if listeners.is_ok() {
            return range;
        }
    }
    panic!(
        "found no {len} consecutive free ports between 20000 and 32767 (below the ephemeral range, so no outgoing connection takes one)"
    );
}

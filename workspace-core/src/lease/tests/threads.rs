//! Port leases between threads of one process.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Arc, Barrier};
use std::thread;

use tempfile::TempDir;

use super::super::{LeaseError, LeaseKind, LeaseRange, Leases, PortLease};
use super::port_range;

#[test]
fn eight_threads_share_ten_ports_without_duplicates() {
    let dir = TempDir::new().unwrap();
    let range = port_range(10);
    let leases = Leases::open(dir.path(), range.clone()).unwrap();
    let start = Arc::new(Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let (leases, start) = (leases.clone(), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                // Lease until exhausted, holding everything.
                let mut held = Vec::new();
                loop {
                    match leases.lease_port(&format!("thread-{i}")) {
                        Ok(lease) => held.push(lease),
                        Err(LeaseError::Exhausted { .. }) => return held,
                        Err(other) => panic!("thread {i}: {other}"),
                    }
                }
            })
        })
        .collect();
    let mut held: Vec<PortLease> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();

    let ports: BTreeSet<u16> = held.iter().map(PortLease::port).collect();
    assert_eq!(ports.len(), held.len(), "a port was leased twice");
    assert_eq!(ports, range.clone().collect::<BTreeSet<u16>>());

    match leases.lease_port("eleventh") {
        Err(LeaseError::Exhausted { kind, range: tried }) => {
            assert_eq!(kind, LeaseKind::Port);
            assert_eq!(tried, LeaseRange::Ports(range.clone()));
        }
        other => panic!("expected Exhausted, got {other:?}"),
    }

    let freed = held.swap_remove(3).port();
    let again = leases.lease_port("again").unwrap();
    assert_eq!(again.port(), freed, "dropping one frees exactly that port");
    assert!(matches!(
        leases.lease_port("twelfth"),
        Err(LeaseError::Exhausted { .. })
    ));
}

#[test]
fn two_leases_of_one_port_in_one_process_conflict() {
    let dir = TempDir::new().unwrap();
    let port = *port_range(1).start();
    let leases = Leases::open(dir.path(), port..=port).unwrap();
    for round in 0..50 {
        let start = Arc::new(Barrier::new(2));
        let contenders: Vec<_> = (0..2)
            .map(|i| {
                let (leases, start) = (leases.clone(), Arc::clone(&start));
                thread::spawn(move || {
                    start.wait();
                    let lease = leases.lease_port_exact(port, &format!("contender-{i}"));
                    // Keep a winner alive until both have tried.
                    start.wait();
                    lease
                })
            })
            .collect();
        let results: Vec<_> = contenders.into_iter().map(|t| t.join().unwrap()).collect();
        let winners = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(winners, 1, "round {round}: {results:?}");
        for result in &results {
            if let Err(error) = result {
                assert!(
                    matches!(error, LeaseError::Taken { kind: LeaseKind::Port, name, .. } if *name == port.to_string()),
                    "round {round}: {error}"
                );
            }
        }
    }
    // A held lease is also visible as Taken, naming this process.
    let held = leases.lease_port_exact(port, "holder").unwrap();
    match leases.lease_port_exact(port, "second") {
        Err(LeaseError::Taken {
            holder: Some(info), ..
        }) => {
            assert_eq!(info.pid, std::process::id());
            assert_eq!(info.holder, "holder");
        }
        other => panic!("expected Taken, got {other:?}"),
    }
    drop(held);
    assert!(leases.lease_port_exact(port, "third").is_ok());
}

#[test]
fn a_port_bound_outside_the_lease_system_is_skipped() {
    let dir = TempDir::new().unwrap();
    let range = port_range(2);
    let (busy, free) = (*range.start(), *range.end());
    let leases = Leases::open(dir.path(), range).unwrap();
    let _outside = TcpListener::bind((Ipv4Addr::LOCALHOST, busy)).unwrap();

    assert_eq!(leases.lease_port("skipper").unwrap().port(), free);
    assert!(matches!(
        leases.lease_port_exact(busy, "exact"),
        Err(LeaseError::PortUnavailable { port, .. }) if port == busy
    ));
    // The refused port was not left locked.
    assert!(leases.holders().unwrap().is_empty());
}

#[test]
fn the_record_shows_the_holder_and_release_clears_it() {
    let dir = TempDir::new().unwrap();
    let port = *port_range(1).start();
    let leases = Leases::open(dir.path(), port..=port).unwrap();
    let lock_path = dir.path().join(format!("leases/ports/{port}.lock"));

    let lease = leases.lease_port("recorded").unwrap();
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&lock_path).unwrap()).unwrap();
    assert_eq!(record["pid"], std::process::id());
    assert_eq!(record["holder"], "recorded");
    assert!(record["since_unix_ms"].as_u64().unwrap() > 0);
    let holders = leases.holders().unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(
        (holders[0].kind, holders[0].name.as_str()),
        (LeaseKind::Port, &*port.to_string())
    );

    lease.release().unwrap();
    assert!(lock_path.exists(), "the lock file stays");
    assert!(
        std::fs::read(&lock_path).unwrap().is_empty(),
        "the record is cleared"
    );
    assert!(leases.holders().unwrap().is_empty());

    let lease = leases.lease_port("dropped").unwrap();
    drop(lease);
    assert!(std::fs::read(&lock_path).unwrap().is_empty());
    assert!(leases.holders().unwrap().is_empty());
}

#[test]
fn open_validates_the_port_range() {
    let dir = TempDir::new().unwrap();
    #[allow(clippy::reversed_empty_ranges)]
    let empty = 50_001..=50_000;
    assert!(matches!(
        Leases::open(dir.path(), empty),
        Err(LeaseError::InvalidPortRange {
            start: 50_001,
            end: 50_000,
            ..
        })
    ));
    assert!(matches!(
        Leases::open(dir.path(), 0..=10),
        Err(LeaseError::InvalidPortRange { start: 0, .. })
    ));
    let leases = Leases::open(dir.path(), 1..=1).unwrap();
    assert!(matches!(
        leases.lease_port_exact(0, "zero"),
        Err(LeaseError::InvalidPort { port: 0 })
    ));
    for sub in ["ports", "cache", "schema"] {
        assert!(dir.path().join("leases").join(sub).is_dir());
    }
}

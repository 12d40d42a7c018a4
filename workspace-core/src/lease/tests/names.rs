//! Name leases: validation, exact names and unique names across threads.

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};
use std::thread;

use tempfile::TempDir;

use super::super::{LeaseError, LeaseKind, Leases, NameKind, NameLease};

fn open() -> (TempDir, Leases) {
    let dir = TempDir::new().unwrap();
    let leases = Leases::open(dir.path(), 1..=1).unwrap();
    (dir, leases)
}

#[test]
fn invalid_names_are_rejected() {
    let (_dir, leases) = open();
    let long = "a".repeat(64);
    for (kind, name) in [
        (NameKind::CachePrefix, ""),
        (NameKind::CachePrefix, long.as_str()),
        (NameKind::CachePrefix, "a.b"),
        (NameKind::CachePrefix, "../escape"),
        (NameKind::CachePrefix, "a/b"),
        (NameKind::CachePrefix, "with space"),
        (NameKind::CachePrefix, "caché"),
        (NameKind::Schema, ""),
        (NameKind::Schema, "has-dash"),
        (NameKind::Schema, "Upper"),
        (NameKind::Schema, "1starts_with_digit"),
        (NameKind::Schema, long.as_str()),
    ] {
        match leases.lease_name(kind, name, "t") {
            Err(LeaseError::InvalidName {
                kind: k, name: n, ..
            }) => {
                assert_eq!((k, n.as_str()), (kind, name));
            }
            other => panic!("{kind} {name:?}: expected InvalidName, got {other:?}"),
        }
        assert!(matches!(
            leases.lease_unique(kind, name, "t"),
            Err(LeaseError::InvalidName { .. })
        ));
    }
    // A stem with no room left for the counter.
    assert!(matches!(
        leases.lease_unique(NameKind::CachePrefix, &"a".repeat(60), "t"),
        Err(LeaseError::InvalidName { .. })
    ));
    // Nothing was created for rejected names.
    assert!(leases.holders().unwrap().is_empty());

    let max = "a".repeat(63);
    for (kind, name) in [
        (NameKind::CachePrefix, "Cache_prefix-1"),
        (NameKind::CachePrefix, max.as_str()),
        (NameKind::Schema, "_schema_1"),
        (NameKind::Schema, max.as_str()),
    ] {
        let lease = leases.lease_name(kind, name, "t").unwrap();
        assert_eq!((lease.kind(), lease.name()), (kind, name));
    }
}

#[test]
fn an_exact_name_is_taken_until_released() {
    let (_dir, leases) = open();
    let held = leases
        .lease_name(NameKind::Schema, "shared", "first")
        .unwrap();
    match leases.lease_name(NameKind::Schema, "shared", "second") {
        Err(LeaseError::Taken {
            kind,
            name,
            holder: Some(info),
        }) => {
            assert_eq!((kind, name.as_str()), (LeaseKind::Schema, "shared"));
            assert_eq!(
                (info.pid, info.holder.as_str()),
                (std::process::id(), "first")
            );
        }
        other => panic!("expected Taken, got {other:?}"),
    }
    // Kinds are separate namespaces.
    let _cache = leases
        .lease_name(NameKind::CachePrefix, "shared", "cache")
        .unwrap();
    drop(held);
    assert!(
        leases
            .lease_name(NameKind::Schema, "shared", "third")
            .is_ok()
    );
}

#[test]
fn unique_names_do_not_collide_across_threads() {
    let (_dir, leases) = open();
    let start = Arc::new(Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let (leases, start) = (leases.clone(), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                (0..5)
                    .map(|_| {
                        leases
                            .lease_unique(NameKind::CachePrefix, "cache", &format!("thread-{i}"))
                            .unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let held: Vec<NameLease> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let names: BTreeSet<&str> = held.iter().map(NameLease::name).collect();
    assert_eq!(names.len(), 40, "a name was leased twice");
    let expected: BTreeSet<String> = (1..=40).map(|n| format!("cache-{n}")).collect();
    assert_eq!(names, expected.iter().map(String::as_str).collect());
    assert_eq!(leases.holders().unwrap().len(), 40);

    // Schemas use '_' and fill the lowest free counter.
    let first = leases.lease_unique(NameKind::Schema, "run", "s").unwrap();
    let second = leases.lease_unique(NameKind::Schema, "run", "s").unwrap();
    assert_eq!((first.name(), second.name()), ("run_1", "run_2"));
    drop(first);
    assert_eq!(
        leases
            .lease_unique(NameKind::Schema, "run", "s")
            .unwrap()
            .name(),
        "run_1"
    );
}

#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

use std::time::Duration;

use super::ticket::{TicketRecord, ticket_files};
use super::*;
use crate::capacity::Dimension;

fn slots(n: u32) -> Resources {
    Resources {
        cpu_millis: 4000,
        memory_bytes: 8 << 30,
        disk_bytes: 0,
        slots: n,
    }
}

fn one() -> Resources {
    Resources {
        slots: 1,
        ..Resources::ZERO
    }
}

#[tokio::test]
async fn grants_at_once_when_free_and_releases_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let pool = HostPool::open(dir.path(), slots(2));
    let a = pool.admit("a", one()).await.unwrap();
    let b = pool.admit("b", one()).await.unwrap();
    let snapshot = pool.snapshot().unwrap();
    let labels: Vec<_> = snapshot.holders.iter().map(|h| h.label.as_str()).collect();
    assert_eq!(labels, ["a", "b"]);
    assert_eq!(snapshot.in_use.slots, 2);
    assert!(snapshot.waiters.is_empty());
    drop((a, b));
    assert_eq!(pool.snapshot().unwrap().in_use, Resources::ZERO);
    assert!(ticket_files(dir.path()).unwrap().is_empty());
}

#[tokio::test]
async fn over_the_total_fails_at_once_without_a_ticket() {
    let dir = tempfile::tempdir().unwrap();
    let pool = HostPool::open(dir.path(), slots(1));
    let err = pool
        .admit(
            "big",
            Resources {
                slots: 2,
                ..Resources::ZERO
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            CapacityError::ExceedsTotal {
                dimension: Dimension::Slots,
                requested: 2,
                total: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(ticket_files(dir.path()).unwrap().is_empty());
}

#[tokio::test]
async fn a_waiter_is_admitted_when_the_holder_releases_and_is_visible_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    // Two handles on one directory behave like two processes.
    let first = HostPool::open(dir.path(), slots(1));
    let second = HostPool::open(dir.path(), slots(1));
    let held = first.admit("holder", one()).await.unwrap();
    let waiting = tokio::spawn(async move { second.admit("waiter", one()).await });
    wait_for(|| first.snapshot().unwrap().waiters.len() == 1).await;
    let snapshot = first.snapshot().unwrap();
    assert_eq!(snapshot.holders[0].label, "holder");
    assert_eq!(snapshot.waiters[0].label, "waiter");
    assert_eq!(snapshot.waiters[0].position, 0);
    assert!(!waiting.is_finished());
    drop(held);
    let grant = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(grant.label(), "waiter");
    assert_eq!(first.snapshot().unwrap().holders[0].label, "waiter");
}

#[tokio::test]
async fn a_large_head_is_not_overtaken_by_small_requests() {
    let dir = tempfile::tempdir().unwrap();
    let pool = HostPool::open(dir.path(), slots(2));
    let small = pool.admit("small", one()).await.unwrap();
    let big_pool = pool.clone();
    let big = tokio::spawn(async move {
        big_pool
            .admit(
                "big",
                Resources {
                    slots: 2,
                    ..Resources::ZERO
                },
            )
            .await
    });
    wait_for(|| pool.snapshot().unwrap().waiters.len() == 1).await;
    // One slot is free, but the big request waits ahead.
    let late_pool = pool.clone();
    let late = tokio::spawn(async move { late_pool.admit("late", one()).await });
    wait_for(|| pool.snapshot().unwrap().waiters.len() == 2).await;
    tokio::time::sleep(POLL_INTERVAL * 3).await;
    assert!(!late.is_finished(), "the late request overtook the queue");
    drop(small);
    let big = big.await.unwrap().unwrap();
    wait_for(|| pool.snapshot().unwrap().waiters.len() == 1).await;
    assert!(!late.is_finished());
    drop(big);
    assert_eq!(late.await.unwrap().unwrap().label(), "late");
}

#[tokio::test]
async fn dropping_a_waiting_admit_leaves_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let pool = HostPool::open(dir.path(), slots(1));
    let held = pool.admit("holder", one()).await.unwrap();
    let timed =
        tokio::time::timeout(Duration::from_millis(200), pool.admit("gives-up", one())).await;
    assert!(timed.is_err());
    let snapshot = pool.snapshot().unwrap();
    assert!(snapshot.waiters.is_empty(), "{snapshot:?}");
    assert_eq!(ticket_files(dir.path()).unwrap().len(), 1);
    drop(held);
}

#[tokio::test]
async fn stale_tickets_are_ignored_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let pool = HostPool::open(dir.path(), slots(1));
    // A record left by a dead holder: the file exists but nobody locks it.
    let record = TicketRecord {
        label: "dead".into(),
        pid: 1,
        resources: one(),
        since_unix_ms: 1,
        granted_unix_ms: Some(2),
    };
    let stale = ticket::ticket_path(dir.path(), 0);
    std::fs::write(&stale, serde_json::to_vec(&record).unwrap()).unwrap();
    let grant = tokio::time::timeout(Duration::from_secs(5), pool.admit("alive", one()))
        .await
        .unwrap()
        .unwrap();
    assert!(!stale.exists());
    // Numbering continued after the stale file.
    assert_eq!(pool.snapshot().unwrap().holders[0].id, 1);
    drop(grant);
}

#[tokio::test]
async fn ticket_numbers_keep_increasing() {
    let dir = tempfile::tempdir().unwrap();
    let pool = HostPool::open(dir.path(), slots(1));
    for expected in 0..3 {
        let grant = pool.admit("again", one()).await.unwrap();
        assert_eq!(pool.snapshot().unwrap().holders[0].id, expected);
        drop(grant);
    }
}

#[tokio::test]
async fn the_counter_is_written_in_place_and_one_cut_short_never_reorders_live_tickets() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let pool = HostPool::open(dir.path(), slots(2));
    let first = pool.admit("first", one()).await.unwrap();
    let counter = dir.path().join("next_ticket");
    let inode = std::fs::metadata(&counter).unwrap().ino();
    drop(first);
    let held = pool.admit("held", one()).await.unwrap();
    assert_eq!(std::fs::metadata(&counter).unwrap().ino(), inode);
    assert_eq!(std::fs::read_to_string(&counter).unwrap(), "2\n");
    // A crash cut the counter's last write short: a smaller number, or none.
    for cut in ["0\n", "", "garbage"] {
        std::fs::write(&counter, cut).unwrap();
        let next = pool.admit("next", one()).await.unwrap();
        let ids: Vec<u64> = pool
            .snapshot()
            .unwrap()
            .holders
            .iter()
            .map(|h| h.id)
            .collect();
        assert_eq!(ids, [1, 2], "after a counter of {cut:?}");
        drop(next);
    }
    drop(held);
}

async fn wait_for(mut condition: impl FnMut() -> bool) {
    for _ in 0..400 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("condition never held");
}

#[tokio::test]
async fn a_grant_whose_descriptor_was_handed_out_is_held_until_every_copy_closes() {
    for leave in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let pool = HostPool::open(dir.path(), slots(1));
        let grant = pool.admit("live", one()).await.unwrap();
        // What a sandbox keeps open for its life.
        let copy = grant
            .descriptor()
            .expect("a host pool grant has one")
            .unwrap();
        if leave {
            grant.leave();
        } else {
            // Dropped on a path that did not leave on purpose: still held.
            drop(grant);
        }
        let snapshot = pool.snapshot().unwrap();
        assert_eq!(snapshot.in_use.slots, 1, "leave = {leave}");
        assert_eq!(snapshot.holders[0].label, "live");
        let waited = tokio::time::timeout(Duration::from_millis(300), pool.admit("next", one()));
        assert!(
            waited.await.is_err(),
            "admitted while the copy holds the slot"
        );
        // The last copy closed (the sandbox ended): the capacity is back, and
        // the stale ticket goes with the next scan.
        drop(copy);
        assert_eq!(pool.snapshot().unwrap().in_use, Resources::ZERO);
        assert!(ticket_files(dir.path()).unwrap().is_empty());
        drop(pool.admit("next", one()).await.unwrap());
    }
}

#[tokio::test]
async fn a_run_never_waits_behind_its_own_grant_and_another_does() {
    let dir = tempfile::tempdir().unwrap();
    let pool = HostPool::open(dir.path(), slots(1));
    // The run's grant, still held (as by its live sandbox), fills the host.
    let held = pool.admit("run-1", one()).await.unwrap();
    // The same run asking again (sealing again) is admitted at once ...
    let again = tokio::time::timeout(Duration::from_secs(5), pool.admit("run-1", one()))
        .await
        .expect("a run waited behind its own grant")
        .unwrap();
    // ... another run waits for the host.
    let other = tokio::time::timeout(Duration::from_millis(300), pool.admit("run-2", one())).await;
    assert!(other.is_err(), "another run was admitted on a full host");
    drop((held, again));
    let other = pool.admit("run-2", one()).await.unwrap();
    drop(other);
}

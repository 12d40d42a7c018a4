//! FIFO admission, visible waiting, non-blocking reservations and impossible requests.

use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::SystemTime;

use tokio::task::JoinHandle;

use super::super::{CapacityError, Dimension, Reservation};
use super::{Capacity, labels_of_holders, labels_of_waiters, poll_once, res, slots, wait_until};

/// Spawns a task that reserves, logs its label on admission, and holds until the
/// returned sender fires (or is dropped).
fn spawn_holder(
    pool: &Capacity,
    label: &'static str,
    request: super::Resources,
    log: &Arc<Mutex<Vec<&'static str>>>,
) -> (JoinHandle<()>, tokio::sync::oneshot::Sender<()>) {
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let (pool, log) = (pool.clone(), Arc::clone(log));
    let task = tokio::spawn(async move {
        let reservation = pool.reserve(label, request).await.unwrap();
        log.lock().unwrap().push(label);
        let _ = released.await;
        drop(reservation);
    });
    (task, release)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_request_is_not_overtaken_by_small_ones() {
    let pool = Capacity::new(res(4_000, 0, 0, 4));
    let small = res(1_000, 0, 0, 1);
    let large = res(3_000, 0, 0, 3);
    let mut full: Vec<Reservation> = (0..4)
        .map(|i| pool.try_reserve(format!("initial-{i}"), small).unwrap())
        .collect();

    let log = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for (label, request) in [
        ("large", large),
        ("small-1", small),
        ("small-2", small),
        ("small-3", small),
    ] {
        waiters.push(spawn_holder(&pool, label, request, &log));
        // Enqueue one at a time so the queue order is the order written here.
        wait_until(&pool, label, |s| s.waiters.iter().any(|w| w.label == label)).await;
    }

    // Free one small share: every small waiter would fit, but the head does not.
    // Grants happen synchronously inside the drop, so the snapshot right after it is final.
    drop(full.pop());
    let snapshot = pool.snapshot();
    assert_eq!(
        labels_of_waiters(&snapshot),
        ["large", "small-1", "small-2", "small-3"]
    );
    assert_eq!(snapshot.holders.len(), 3);
    drop(full.pop());
    assert_eq!(
        pool.snapshot().waiters.len(),
        4,
        "nobody overtakes the large head"
    );

    // Now 3000 are free: the large one is admitted, the small ones still wait.
    drop(full.pop());
    let snapshot = pool.snapshot();
    assert_eq!(labels_of_holders(&snapshot), ["initial-0", "large"]);
    assert_eq!(
        labels_of_waiters(&snapshot),
        ["small-1", "small-2", "small-3"]
    );
    wait_until(&pool, "large logged", |_| log.lock().unwrap().len() == 1).await;
    assert_eq!(*log.lock().unwrap(), ["large"]);

    // The last initial holder leaves: exactly the next small one fits.
    drop(full.pop());
    assert_eq!(labels_of_waiters(&pool.snapshot()), ["small-2", "small-3"]);
    wait_until(&pool, "small-1 logged", |_| log.lock().unwrap().len() == 2).await;
    assert_eq!(*log.lock().unwrap(), ["large", "small-1"]);

    let mut waiters = waiters.into_iter();
    if let Some((task, release)) = waiters.next() {
        release.send(()).unwrap();
        task.await.unwrap();
    }
    assert!(pool.snapshot().waiters.is_empty());
    for (task, release) in waiters {
        release.send(()).unwrap();
        task.await.unwrap();
    }
    let order = log.lock().unwrap().clone();
    assert_eq!(&order[..2], ["large", "small-1"]);
    assert_eq!(order.len(), 4);
    assert_eq!(pool.snapshot().in_use, super::Resources::ZERO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_is_visible_in_order_with_labels_and_since() {
    let started = SystemTime::now();
    let pool = Capacity::new(slots(1));
    let holder = pool.reserve("holder", slots(1)).await.unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for label in ["first", "second", "third"] {
        waiters.push(spawn_holder(&pool, label, slots(1), &log));
        wait_until(&pool, label, |s| s.waiters.iter().any(|w| w.label == label)).await;
    }

    let snapshot = pool.snapshot();
    assert_eq!(labels_of_holders(&snapshot), ["holder"]);
    assert_eq!(snapshot.holders[0].since, holder.since());
    assert_eq!(snapshot.holders[0].id, holder.id());
    assert_eq!(labels_of_waiters(&snapshot), ["first", "second", "third"]);
    let positions: Vec<usize> = snapshot.waiters.iter().map(|w| w.position).collect();
    assert_eq!(positions, [0, 1, 2]);
    assert!(snapshot.waiters.iter().all(|w| w.resources == slots(1)));
    assert!(snapshot.waiters[0].since >= started);
    assert!(
        snapshot
            .waiters
            .windows(2)
            .all(|p| p[0].since <= p[1].since)
    );
    assert!(
        snapshot
            .waiters
            .iter()
            .all(|w| w.since <= SystemTime::now())
    );
    assert_eq!(snapshot.in_use, slots(1));

    // The snapshot is serializable for the evidence record.
    let json = serde_json::to_value(&snapshot).unwrap();
    assert_eq!(json["waiters"][2]["label"], "third");
    assert_eq!(json["holders"][0]["label"], "holder");

    drop(holder);
    for (task, release) in waiters {
        release.send(()).unwrap();
        task.await.unwrap();
    }
    assert_eq!(*log.lock().unwrap(), ["first", "second", "third"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_reserve_never_overtakes_the_queue() {
    let pool = Capacity::new(slots(2));
    let held = pool.try_reserve("held", slots(1)).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let (task, release) = spawn_holder(&pool, "wants-two", slots(2), &log);
    wait_until(&pool, "wants-two queued", |s| s.waiters.len() == 1).await;

    // One slot is free, but someone waits: refused.
    match pool.try_reserve("sneaky", slots(1)) {
        Err(CapacityError::WouldWait {
            label,
            waiting,
            available,
            ..
        }) => {
            assert_eq!(label, "sneaky");
            assert_eq!(waiting, 1);
            assert_eq!(available, slots(1));
        }
        other => panic!("expected WouldWait, got {other:?}"),
    }
    drop(held);
    wait_until(&pool, "wants-two holds", |s| {
        s.holders.len() == 1 && s.waiters.is_empty()
    })
    .await;
    // Nobody waits, but nothing fits: refused.
    assert!(matches!(
        pool.try_reserve("late", slots(1)),
        Err(CapacityError::WouldWait { waiting: 0, .. })
    ));
    release.send(()).unwrap();
    task.await.unwrap();
    assert!(pool.try_reserve("free again", slots(2)).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_larger_than_the_total_fails_at_once_naming_the_dimension() {
    let total = res(1_000, 1 << 20, 1 << 30, 2);
    let pool = Capacity::new(total);
    // Fill the pool and queue someone, so a wrong implementation would wait.
    let _held = pool.try_reserve("held", total).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let (_task, _release) = spawn_holder(&pool, "queued", slots(1), &log);
    wait_until(&pool, "queued", |s| s.waiters.len() == 1).await;

    let cases = [
        (res(1_001, 0, 0, 0), Dimension::Cpu, 1_001, 1_000),
        (
            res(0, (1 << 20) + 1, 0, 0),
            Dimension::Memory,
            (1 << 20) + 1,
            1 << 20,
        ),
        (res(0, 0, 1 << 31, 0), Dimension::Disk, 1 << 31, 1 << 30),
        (res(0, 0, 0, 3), Dimension::Slots, 3, 2),
    ];
    for (request, expected, expected_requested, expected_total) in cases {
        let mut future = Box::pin(pool.reserve("too-big", request));
        // Decided on the first poll, without waiting.
        let Poll::Ready(result) = poll_once(future.as_mut()) else {
            panic!("{expected}: an impossible request waited");
        };
        match result {
            Err(CapacityError::ExceedsTotal {
                label,
                dimension,
                requested,
                total,
            }) => {
                assert_eq!(label, "too-big");
                assert_eq!(dimension, expected);
                assert_eq!((requested, total), (expected_requested, expected_total));
                let message = CapacityError::ExceedsTotal {
                    label,
                    dimension,
                    requested,
                    total,
                }
                .to_string();
                assert!(message.contains(expected.field_name()), "{message}");
            }
            other => panic!("expected ExceedsTotal, got {other:?}"),
        }
        assert!(matches!(
            pool.try_reserve("too-big", request),
            Err(CapacityError::ExceedsTotal { dimension, .. }) if dimension == expected
        ));
    }
    assert_eq!(labels_of_waiters(&pool.snapshot()), ["queued"]);
}

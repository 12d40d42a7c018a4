//! Reservations are returned on every path: drop, error, panic, cancellation, timeout.

use std::time::Duration;

use super::super::{CapacityError, Resources};
use super::{Capacity, labels_of_holders, labels_of_waiters, poll_once, slots, wait_until};

#[derive(Debug)]
struct StepFailed;

async fn failing_step(pool: &Capacity) -> Result<(), StepFailed> {
    let _reservation = pool
        .reserve("failing", slots(1))
        .await
        .map_err(|_| StepFailed)?;
    Err(StepFailed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_path_releases() {
    let pool = Capacity::new(slots(1));
    assert!(failing_step(&pool).await.is_err());
    let snapshot = pool.snapshot();
    assert_eq!(snapshot.in_use, Resources::ZERO);
    assert!(snapshot.holders.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_while_holding_releases_and_admits_the_next() {
    let pool = Capacity::new(slots(1));
    let (go, go_rx) = tokio::sync::oneshot::channel::<()>();
    let panicking = tokio::spawn({
        let pool = pool.clone();
        async move {
            let _reservation = pool.reserve("doomed", slots(1)).await.unwrap();
            let _ = go_rx.await;
            panic!("deliberate panic while holding capacity");
        }
    });
    wait_until(&pool, "doomed holds", |s| {
        labels_of_holders(s) == ["doomed"]
    })
    .await;
    let next = tokio::spawn({
        let pool = pool.clone();
        async move {
            pool.reserve("next", slots(1))
                .await
                .map(|r| r.label().to_string())
        }
    });
    wait_until(&pool, "next waits", |s| labels_of_waiters(s) == ["next"]).await;

    go.send(()).unwrap();
    let joined = panicking.await;
    assert!(joined.is_err_and(|e| e.is_panic()));
    assert_eq!(next.await.unwrap().unwrap(), "next");
    let snapshot = pool.snapshot();
    assert_eq!(snapshot.in_use, Resources::ZERO, "{snapshot:?}");
    assert!(snapshot.holders.is_empty() && snapshot.waiters.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_leaves_the_queue_and_the_next_is_admitted() {
    let pool = Capacity::new(slots(1));
    let holder = pool.reserve("holder", slots(1)).await.unwrap();
    let cancelled = tokio::spawn({
        let pool = pool.clone();
        async move { pool.reserve("cancelled", slots(1)).await.map(drop) }
    });
    wait_until(&pool, "cancelled queued", |s| s.waiters.len() == 1).await;
    let next = tokio::spawn({
        let pool = pool.clone();
        async move {
            pool.reserve("next", slots(1))
                .await
                .map(|r| r.label().to_string())
        }
    });
    wait_until(&pool, "next queued", |s| s.waiters.len() == 2).await;

    cancelled.abort();
    assert!(cancelled.await.is_err_and(|e| e.is_cancelled()));
    let snapshot = pool.snapshot();
    assert_eq!(labels_of_waiters(&snapshot), ["next"]);
    assert_eq!(snapshot.waiters[0].position, 0);

    drop(holder);
    assert_eq!(next.await.unwrap().unwrap(), "next");
    assert_eq!(pool.snapshot().in_use, Resources::ZERO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_blocking_head_admits_those_behind_it() {
    let pool = Capacity::new(slots(2));
    let _holder = pool.reserve("holder", slots(1)).await.unwrap();
    let mut large = Box::pin(pool.reserve("large", slots(2)));
    assert!(poll_once(large.as_mut()).is_pending());
    let mut small = Box::pin(pool.reserve("small", slots(1)));
    assert!(
        poll_once(small.as_mut()).is_pending(),
        "small must queue behind large"
    );
    assert_eq!(labels_of_waiters(&pool.snapshot()), ["large", "small"]);

    drop(large);
    // Admitted synchronously when the head left.
    let snapshot = pool.snapshot();
    assert_eq!(labels_of_holders(&snapshot), ["holder", "small"]);
    assert!(snapshot.waiters.is_empty());
    let reservation = small.await.unwrap();
    assert_eq!(reservation.label(), "small");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_racing_with_cancellation_is_returned() {
    let pool = Capacity::new(slots(1));
    let holder = pool.reserve("holder", slots(1)).await.unwrap();
    let mut waiting = Box::pin(pool.reserve("granted-then-dropped", slots(1)));
    assert!(poll_once(waiting.as_mut()).is_pending());

    // The release grants the waiter: the reservation now sits in its channel.
    drop(holder);
    let snapshot = pool.snapshot();
    assert_eq!(labels_of_holders(&snapshot), ["granted-then-dropped"]);
    assert!(snapshot.waiters.is_empty());

    // The future is dropped before it ever sees the grant.
    drop(waiting);
    let snapshot = pool.snapshot();
    assert_eq!(snapshot.in_use, Resources::ZERO, "{snapshot:?}");
    assert!(snapshot.holders.is_empty());
    assert!(pool.try_reserve("after", slots(1)).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_reservation_leaves_the_queue() {
    let pool = Capacity::new(slots(1));
    let holder = pool.reserve("holder", slots(1)).await.unwrap();
    match pool
        .reserve_timeout("impatient", slots(1), Duration::from_millis(20))
        .await
    {
        Err(CapacityError::Timeout {
            label,
            requested,
            waited,
        }) => {
            assert_eq!(label, "impatient");
            assert_eq!(requested, slots(1));
            assert_eq!(waited, Duration::from_millis(20));
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(pool.snapshot().waiters.is_empty());
    drop(holder);
    let granted = pool
        .reserve_timeout("patient", slots(1), Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(granted.label(), "patient");
}

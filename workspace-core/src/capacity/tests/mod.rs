//! Tests of the capacity pool. No test asserts on elapsed time; timeouts here only
//! turn a hang into a failure.

mod ordering;
mod release;
mod stress;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::{Capacity, CapacitySnapshot, Resources};

pub(super) fn res(cpu_millis: u64, memory_bytes: u64, disk_bytes: u64, slots: u32) -> Resources {
    Resources {
        cpu_millis,
        memory_bytes,
        disk_bytes,
        slots,
    }
}

/// One slot of a pool that only counts slots.
pub(super) fn slots(n: u32) -> Resources {
    res(0, 0, 0, n)
}

/// Waits until `condition` holds on the pool's snapshot (fails after 30 s: a hang guard).
pub(super) async fn wait_until(
    pool: &Capacity,
    what: &str,
    condition: impl Fn(&CapacitySnapshot) -> bool,
) -> CapacitySnapshot {
    let waited = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let snapshot = pool.snapshot();
            if condition(&snapshot) {
                return snapshot;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    match waited {
        Ok(snapshot) => snapshot,
        Err(_) => panic!(
            "never reached: {what}; last snapshot {:#?}",
            pool.snapshot()
        ),
    }
}

/// Polls a future exactly once, without a runtime.
pub(super) fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(Waker::noop()))
}

pub(super) fn labels_of_waiters(snapshot: &CapacitySnapshot) -> Vec<&str> {
    snapshot.waiters.iter().map(|w| w.label.as_str()).collect()
}

pub(super) fn labels_of_holders(snapshot: &CapacitySnapshot) -> Vec<&str> {
    snapshot.holders.iter().map(|h| h.label.as_str()).collect()
}

#[test]
fn reserve_future_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let pool = Capacity::new(slots(1));
    let future = pool.reserve("x", slots(1));
    assert_send(&future);
    let future = pool.reserve_timeout("x", slots(1), Duration::from_secs(1));
    assert_send(&future);
}

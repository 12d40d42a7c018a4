//! Many concurrent holders with random requests never exceed the total.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use super::super::{CapacitySnapshot, Dimension, Resources};
use super::{Capacity, res};

/// splitmix64: a tiny seeded PRNG, enough for reproducible test inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..=max`.
    fn upto(&mut self, max: u64) -> u64 {
        self.next() % (max + 1)
    }
}

/// The invariants every snapshot must satisfy.
fn check_snapshot(snapshot: &CapacitySnapshot) {
    let mut sum = Resources::ZERO;
    for holder in &snapshot.holders {
        sum = sum.saturating_add(&holder.resources);
    }
    assert_eq!(sum, snapshot.in_use, "in_use is the sum of the holders");
    assert!(
        snapshot.in_use.fits(&snapshot.total),
        "in use {:?} exceeds total {:?}",
        snapshot.in_use,
        snapshot.total
    );
    for (position, waiter) in snapshot.waiters.iter().enumerate() {
        assert_eq!(waiter.position, position);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hundred_random_holders_never_exceed_the_total() {
    let total = res(4_000, 1_000, 500, 6);
    let pool = Capacity::new(total);
    // Independent of the pool's bookkeeping: what holders say they hold right now.
    let held: Arc<[AtomicU64; 4]> = Arc::new(Default::default());
    let max_waiting = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));

    let monitor = tokio::spawn({
        let (pool, done) = (pool.clone(), Arc::clone(&done));
        async move {
            let mut checks = 0_u64;
            while !done.load(Ordering::SeqCst) {
                check_snapshot(&pool.snapshot());
                checks += 1;
                tokio::task::yield_now().await;
            }
            checks
        }
    });

    let mut rng = Rng(0x5EED_CAFE);
    let mut tasks = Vec::new();
    for i in 0..100 {
        let request = res(
            rng.upto(total.cpu_millis),
            rng.upto(total.memory_bytes / 2),
            rng.upto(total.disk_bytes / 3),
            u32::try_from(rng.upto(2)).unwrap_or(1),
        );
        let hold = rng.upto(3);
        let (pool, held, max_waiting) = (pool.clone(), Arc::clone(&held), Arc::clone(&max_waiting));
        tasks.push(tokio::spawn(async move {
            let reservation = pool.reserve(format!("task-{i}"), request).await.unwrap();
            assert_eq!(reservation.resources(), request);
            for (slot, dimension) in held.iter().zip(Dimension::ALL) {
                let now = slot.fetch_add(request.get(dimension), Ordering::SeqCst)
                    + request.get(dimension);
                assert!(
                    now <= total.get(dimension),
                    "{dimension}: {now} held at once"
                );
            }
            let snapshot = pool.snapshot();
            check_snapshot(&snapshot);
            assert!(snapshot.holders.iter().any(|h| h.id == reservation.id()));
            max_waiting.fetch_max(snapshot.waiters.len(), Ordering::SeqCst);
            if hold == 0 {
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(Duration::from_millis(hold)).await;
            }
            for (slot, dimension) in held.iter().zip(Dimension::ALL) {
                slot.fetch_sub(request.get(dimension), Ordering::SeqCst);
            }
            drop(reservation);
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let checks = monitor.await.unwrap();
    assert!(checks > 0);
    // The test is only meaningful if requests actually had to queue.
    assert!(
        max_waiting.load(Ordering::SeqCst) > 0,
        "no request ever waited"
    );

    let end = pool.snapshot();
    assert_eq!(end.in_use, Resources::ZERO);
    assert!(end.holders.is_empty(), "{:?}", end.holders);
    assert!(end.waiters.is_empty(), "{:?}", end.waiters);
    for slot in held.iter() {
        assert_eq!(slot.load(Ordering::SeqCst), 0);
    }
}

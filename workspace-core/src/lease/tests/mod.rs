//! Tests of the lease registry in this process; across processes: `tests/lease_processes.rs`.
//!
//! Port tests take ranges from [`port_range`]: consecutive, non-overlapping blocks
//! above a random base, each checked bindable first, so bind-probing inside the lease
//! code never skips a port by accident and every test can assert the exact set.

mod names;
mod threads;

use std::hash::{BuildHasher, RandomState};
use std::net::{Ipv4Addr, TcpListener};
use std::ops::RangeInclusive;
use std::sync::Mutex;

/// A random number (std's randomly keyed hasher; no extra dependency).
pub(super) fn random_u64() -> u64 {
    RandomState::new().hash_one(std::process::id())
}

/// `len` consecutive ports, exclusive to the calling test within this process, all
/// bindable on 127.0.0.1 right now.
pub(super) fn port_range(len: u16) -> RangeInclusive<u16> {
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

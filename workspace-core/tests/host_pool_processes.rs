//! The host-wide capacity pool between OS processes. The child is this very test
//! binary, re-executed with [`ROLE`] set in its environment: [`main`] then runs
//! [`child_process`] only (the pattern of `lease_processes.rs`).
//!
//! A test binary of its own (`harness = false`, see [`harness`]): [`main`] runs the
//! cases one at a time, in order, and reports them as libtest does.
//!
//! Every child writes `label start_ms end_ms` to a shared log when it releases, so
//! the tests can check admission order and that holders never overlapped beyond the
//! pool's slots.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod harness;

use std::fs::OpenOptions;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;
use workspace_core::capacity::{AdmissionControl, CapacityError, HostPool, Resources};
use workspace_core::clock::unix_ms_now;

use harness::ReExecChild;

const ROLE: &str = "AGENT_WORKSPACE_POOL_TEST_ROLE";
const DIR: &str = "AGENT_WORKSPACE_POOL_TEST_DIR";
const SLOTS: &str = "AGENT_WORKSPACE_POOL_TEST_SLOTS";
const LABEL: &str = "AGENT_WORKSPACE_POOL_TEST_LABEL";
const LOG: &str = "AGENT_WORKSPACE_POOL_TEST_LOG";
const REQUEST: &str = "AGENT_WORKSPACE_POOL_TEST_REQUEST";
/// Prefix of the child's protocol lines (anything else on its stdout is ignored).
const MARK: &str = "AWPOOL ";

fn main() -> ExitCode {
    if let Ok(role) = std::env::var(ROLE) {
        child_process(&role);
        return ExitCode::SUCCESS;
    }
    harness::run(harness::cases![
        a_second_process_waits_until_the_first_releases,
        processes_are_admitted_in_ticket_order,
        holders_never_exceed_the_slots,
        a_killed_holders_capacity_is_reclaimed,
        a_request_over_the_total_fails_at_once_even_while_others_hold,
    ])
}

/// Child side. Role `hold`: says `ready`, waits for `go`, admits [`REQUEST`] slots
/// (default 1), says `granted` (or `exceeds` / `error`), then holds until stdin
/// closes; role `brief`: the same but holds for 150 ms only, then exits. Both append
/// their interval to [`LOG`] before releasing. A failure panics, so the child exits
/// unsuccessfully.
fn child_process(role: &str) {
    let dir = PathBuf::from(std::env::var(DIR).unwrap());
    let slots: u32 = std::env::var(SLOTS).unwrap().parse().unwrap();
    let label = std::env::var(LABEL).unwrap();
    let log = PathBuf::from(std::env::var(LOG).unwrap());
    let request: u32 = std::env::var(REQUEST).map_or(1, |r| r.parse().unwrap());
    let pool = HostPool::open(&dir, total(slots));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    say("ready");
    let mut stdin = std::io::stdin().lock();
    let mut line = String::new();
    stdin.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "go");

    let grant = match runtime.block_on(pool.admit(&label, slots_of(request))) {
        Ok(grant) => grant,
        Err(CapacityError::ExceedsTotal { .. }) => return say("exceeds"),
        Err(e) => return say(&format!("error {e}")),
    };
    let start = unix_ms_now();
    say("granted");
    match role {
        "hold" => while stdin.read_line(&mut line).is_ok_and(|n| n > 0) {},
        "brief" => thread::sleep(Duration::from_millis(150)),
        other => panic!("unknown role {other}"),
    }
    let end = unix_ms_now();
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .unwrap();
    file.write_all(format!("{label} {start} {end}\n").as_bytes())
        .unwrap();
    drop(file);
    drop(grant);
}

fn say(message: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{MARK}{message}").unwrap();
    out.flush().unwrap();
}

fn total(slots: u32) -> Resources {
    Resources {
        cpu_millis: 1000,
        memory_bytes: 1 << 30,
        disk_bytes: 0,
        slots,
    }
}

fn slots_of(n: u32) -> Resources {
    Resources {
        slots: n,
        ..Resources::ZERO
    }
}

/// One test's pool directory and interval log.
struct World {
    _base: TempDir,
    dir: PathBuf,
    log: PathBuf,
    slots: u32,
}

impl World {
    fn new(slots: u32) -> World {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("capacity");
        let log = base.path().join("intervals.log");
        World {
            _base: base,
            dir,
            log,
            slots,
        }
    }

    fn pool(&self) -> HostPool {
        HostPool::open(&self.dir, total(self.slots))
    }

    fn spawn(&self, role: &str, label: &str) -> ReExecChild {
        self.spawn_with(role, label, 1)
    }

    fn spawn_with(&self, role: &str, label: &str, request: u32) -> ReExecChild {
        let child = ReExecChild::spawn(
            (ROLE, role),
            [
                (DIR, self.dir.display().to_string()),
                (SLOTS, self.slots.to_string()),
                (LABEL, label.to_owned()),
                (LOG, self.log.display().to_string()),
                (REQUEST, request.to_string()),
            ],
            MARK,
        );
        child.expect("ready");
        child
    }

    /// `(label, start, end)` of every release logged so far, in log order.
    fn intervals(&self) -> Vec<(String, u64, u64)> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .map(|line| {
                let mut parts = line.split(' ');
                let label = parts.next().unwrap().to_owned();
                let start = parts.next().unwrap().parse().unwrap();
                let end = parts.next().unwrap().parse().unwrap();
                (label, start, end)
            })
            .collect()
    }

    /// Waits until the pool shows `n` waiters (a 60 s hang guard).
    fn wait_for_waiters(&self, n: usize) {
        let pool = self.pool();
        let deadline = Instant::now() + Duration::from_secs(60);
        while pool.snapshot().unwrap().waiters.len() != n {
            assert!(Instant::now() < deadline, "never saw {n} waiter(s)");
            thread::sleep(Duration::from_millis(10));
        }
    }
}

fn a_second_process_waits_until_the_first_releases() {
    let world = World::new(1);
    let mut first = world.spawn("hold", "first");
    let mut second = world.spawn("hold", "second");
    first.send("go");
    first.expect("granted");
    second.send("go");
    world.wait_for_waiters(1);
    let snapshot = world.pool().snapshot().unwrap();
    assert_eq!(snapshot.holders.len(), 1);
    assert_eq!(snapshot.holders[0].label, "first");
    assert_eq!(snapshot.waiters[0].label, "second");
    assert_eq!(snapshot.in_use.slots, 1);
    // Several polls pass without a grant.
    assert_eq!(second.line_within(Duration::from_millis(500)), None);

    first.finish();
    second.expect("granted");
    second.finish();
    let intervals = world.intervals();
    assert_eq!(intervals.len(), 2);
    assert!(intervals[0].2 <= intervals[1].1, "overlap: {intervals:?}");
    assert!(std::fs::read_dir(&world.dir).unwrap().all(|e| {
        !e.unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".ticket")
    }));
}

fn processes_are_admitted_in_ticket_order() {
    let world = World::new(1);
    // This process holds the only slot while the children queue up one by one.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let pool = world.pool();
    let held = runtime.block_on(pool.admit("parent", slots_of(1))).unwrap();
    let labels = ["c1", "c2", "c3", "c4"];
    let mut children = Vec::new();
    for (i, label) in labels.iter().enumerate() {
        let mut child = world.spawn("brief", label);
        child.send("go");
        world.wait_for_waiters(i + 1);
        children.push(child);
    }
    let snapshot = pool.snapshot().unwrap();
    let waiting: Vec<_> = snapshot.waiters.iter().map(|w| w.label.as_str()).collect();
    assert_eq!(waiting, labels);
    assert!(snapshot.waiters.windows(2).all(|w| w[0].id < w[1].id));
    drop(held);
    for child in children {
        child.expect("granted");
        child.finish();
    }
    let intervals = world.intervals();
    let order: Vec<_> = intervals.iter().map(|(l, _, _)| l.as_str()).collect();
    assert_eq!(order, labels);
    assert_overlap_at_most(&intervals, 1);
}

fn holders_never_exceed_the_slots() {
    let world = World::new(2);
    let mut children: Vec<_> = (0..6)
        .map(|i| world.spawn("brief", &format!("r{i}")))
        .collect();
    for child in &mut children {
        child.send("go");
    }
    for child in children {
        child.expect("granted");
        child.finish();
    }
    let intervals = world.intervals();
    assert_eq!(intervals.len(), 6);
    assert_overlap_at_most(&intervals, 2);
    assert!(world.pool().snapshot().unwrap().holders.is_empty());
}

fn a_killed_holders_capacity_is_reclaimed() {
    let world = World::new(1);
    let mut holder = world.spawn("hold", "killed");
    let mut waiter = world.spawn("hold", "next");
    holder.send("go");
    holder.expect("granted");
    waiter.send("go");
    world.wait_for_waiters(1);
    holder.kill(); // SIGKILL: no destructor runs
    waiter.expect("granted");
    let snapshot = world.pool().snapshot().unwrap();
    let holders: Vec<_> = snapshot.holders.iter().map(|h| h.label.as_str()).collect();
    assert_eq!(holders, ["next"]);
    waiter.finish();
}

fn a_request_over_the_total_fails_at_once_even_while_others_hold() {
    let world = World::new(1);
    let mut holder = world.spawn("hold", "holder");
    holder.send("go");
    holder.expect("granted");
    let mut big = world.spawn_with("hold", "big", 2);
    big.send("go");
    big.expect("exceeds");
    assert!(world.pool().snapshot().unwrap().waiters.is_empty());
    holder.finish();
}

/// Asserts that at no instant more than `max` intervals overlapped.
fn assert_overlap_at_most(intervals: &[(String, u64, u64)], max: usize) {
    let mut events: Vec<(u64, i32)> = Vec::new();
    for (_, start, end) in intervals {
        assert!(start <= end);
        events.push((*start, 1));
        events.push((*end, -1));
    }
    // At equal times a release comes before a grant (the interval is logged inside
    // the hold, so touching ends are not an overlap).
    events.sort();
    let mut current = 0;
    for (_, delta) in events {
        current += delta;
        assert!(
            current <= max as i32,
            "more than {max} held at once: {intervals:?}"
        );
    }
}

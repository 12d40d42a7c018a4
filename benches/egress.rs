//! The egress proxy of an allowlisted workspace, side by side in one run with
//! a direct connection over loopback:
//!
//! * **setup**: a client in a network namespace of the bench's own (as a
//!   workspace's commands are) opens a tunnel through the proxy (`CONNECT`,
//!   policy, connect to the destination, `200`) against a plain TCP connect to
//!   the same destination from the "host";
//! * **1 GiB**: one GiB sent to a sink through that tunnel against the same
//!   over a direct connection.
//!
//! The proxy never reaches the host's loopback, so the bench first moves
//! itself into a network namespace of its own (its "host", so the machine's
//! own network is untouched) and serves the sink on a private address of that
//! namespace's `lo` ([`SINK_ADDRESS`]): a connection to it still crosses
//! the loopback device, as a direct connection over loopback does.
//!
//! Run with `cargo bench --bench egress` as root. Needs `ip` (Debian
//! `iproute2`). Prints, after criterion's report, the medians measured in this
//! same run, the throughput ratio and the setup time the proxy adds.
//!
//! `cargo test --benches` runs every routine once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: failing loudly is right

mod timings;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode};
use nix::sched::{CloneFlags, setns};
use timings::{SAMPLES, print_medians, record};

const SETUP_DIRECT: &str = "connect, direct";
const SETUP_PROXIED: &str = "CONNECT tunnel, proxy";
const BULK_DIRECT: &str = "1 GiB, direct";
const BULK_PROXIED: &str = "1 GiB, proxy";
const GIB: u64 = 1 << 30;
/// The sink's address: private, so the policy allows it only because the
/// bench's allowlist names it literally.
const SINK_ADDRESS: &str = "10.200.0.1";

/// Moves this process into a network namespace of its own whose loopback
/// also answers [`SINK_ADDRESS`]. Called first, while the process has one
/// thread, so every later thread and child is in it.
fn own_network() {
    nix::sched::unshare(CloneFlags::CLONE_NEWNET)
        .expect("unshare(CLONE_NEWNET): the egress bench runs as root");
    for args in [
        vec!["link", "set", "lo", "up"],
        vec!["addr", "add", &format!("{SINK_ADDRESS}/32"), "dev", "lo"],
    ] {
        let ok = Command::new("ip")
            .args(&args)
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "ip {args:?} failed (the egress bench needs Debian's iproute2)"
        );
    }
}

/// A TCP sink on [`SINK_ADDRESS`]: reads each connection to its end, then
/// closes it.
fn sink() -> SocketAddr {
    let listener = TcpListener::bind((SINK_ADDRESS, 0)).unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                // As large a read as the sender's write: the sink is not
                // what limits either path.
                let mut stream = stream;
                let mut buffer = vec![0u8; 256 << 10];
                while stream.read(&mut buffer).is_ok_and(|n| n > 0) {}
            });
        }
    });
    address
}

/// The bench's network namespace and the proxy serving it; removed on drop.
struct Proxied {
    netns: String,
    proxy: Child,
    _dir: tempfile::TempDir,
}

impl Proxied {
    fn start(destination: SocketAddr) -> Self {
        let netns = format!("aw-bench-egress-{}", std::process::id());
        let ip = |args: &[&str]| {
            let ok = Command::new("ip")
                .args(args)
                .status()
                .is_ok_and(|s| s.success());
            assert!(
                ok,
                "ip {args:?} failed (the egress bench needs Debian's iproute2)"
            );
        };
        ip(&["netns", "add", &netns]);
        ip(&["-n", &netns, "link", "set", "lo", "up"]);
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("egress.json");
        let log = dir.path().join("network.jsonl");
        std::fs::write(
            &config,
            serde_json::json!({
                "allow": [destination.to_string()],
                "deny": [],
                "netns": format!("/var/run/netns/{netns}"),
                "log": log,
                "cgroup": null,
                "uid": 65534,
                "gid": 65534,
            })
            .to_string(),
        )
        .unwrap();
        let mut proxy = Command::new(env!("CARGO_BIN_EXE_agent-workspace"))
            .arg("egress-proxy")
            .arg(&config)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        BufReader::new(proxy.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        assert_eq!(ready.trim(), "ready");
        Self {
            netns,
            proxy,
            _dir: dir,
        }
    }

    /// Runs `work` on a thread inside the bench's network namespace.
    fn inside<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> T {
        let netns = std::fs::File::open(format!("/var/run/netns/{}", self.netns)).unwrap();
        std::thread::spawn(move || {
            setns(&netns, CloneFlags::CLONE_NEWNET).unwrap();
            work()
        })
        .join()
        .unwrap()
    }
}

impl Drop for Proxied {
    fn drop(&mut self) {
        let _ = self.proxy.kill();
        let _ = self.proxy.wait();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .status();
    }
}

/// A tunnel to `destination` through the proxy on the calling thread's
/// loopback.
fn tunnel(destination: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect("127.0.0.1:3128").unwrap();
    stream.set_nodelay(true).unwrap();
    write!(
        stream,
        "CONNECT {destination} HTTP/1.1\r\nHost: {destination}\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    stream
}

/// Sends `bytes` and waits until the sink closed the connection.
fn send(mut stream: TcpStream, bytes: u64) -> Duration {
    let chunk = vec![0x5au8; 256 << 10];
    let started = Instant::now();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        stream.write_all(&chunk[..n]).unwrap();
        left -= n as u64;
    }
    stream.shutdown(Shutdown::Write).unwrap();
    let _ = stream.read(&mut [0u8; 1]);
    started.elapsed()
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    let Some(full) = timings::full_run(&mut criterion) else {
        return;
    };
    let bulk = if full { GIB } else { 1 << 20 };
    own_network();
    let destination = sink();
    let proxied = Proxied::start(destination);
    {
        let mut group = criterion.benchmark_group("egress");
        group
            .sample_size(SAMPLES)
            .sampling_mode(SamplingMode::Flat)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(if full { 3 } else { 1 }));
        group.bench_function("setup_direct", |b| {
            b.iter_custom(|iters| {
                let batch = (0..iters)
                    .map(|_| {
                        let started = Instant::now();
                        let stream = TcpStream::connect(destination).unwrap();
                        let took = started.elapsed();
                        drop(stream);
                        took
                    })
                    .collect();
                record(SETUP_DIRECT, batch)
            });
        });
        group.bench_function("setup_proxied", |b| {
            b.iter_custom(|iters| {
                let batch = proxied.inside(move || {
                    (0..iters)
                        .map(|_| {
                            let started = Instant::now();
                            let stream = tunnel(destination);
                            let took = started.elapsed();
                            drop(stream);
                            took
                        })
                        .collect()
                });
                record(SETUP_PROXIED, batch)
            });
        });
        if full {
            group.measurement_time(Duration::from_secs(20));
        }
        group.bench_function("bulk_direct", |b| {
            b.iter_custom(|iters| {
                let batch = (0..iters)
                    .map(|_| send(TcpStream::connect(destination).unwrap(), bulk))
                    .collect();
                record(BULK_DIRECT, batch)
            });
        });
        group.bench_function("bulk_proxied", |b| {
            b.iter_custom(|iters| {
                let batch = proxied.inside(move || {
                    (0..iters)
                        .map(|_| send(tunnel(destination), bulk))
                        .collect()
                });
                record(BULK_PROXIED, batch)
            });
        });
        group.finish();
    }
    criterion.final_summary();
    drop(proxied);

    println!();
    println!("== egress: medians measured in this run (warm-up excluded) ==");
    let rows = [SETUP_DIRECT, SETUP_PROXIED, BULK_DIRECT, BULK_PROXIED].map(|n| (n, n.to_owned()));
    let medians = print_medians(&rows, 24, |_| "not run");
    if let (Some(direct), Some(proxied)) = (medians.get(BULK_DIRECT), medians.get(BULK_PROXIED)) {
        println!(
            "throughput through the proxy / direct: {:.3} ({} bytes)",
            direct.as_secs_f64() / proxied.as_secs_f64(),
            bulk
        );
    }
    if let (Some(direct), Some(proxied)) = (medians.get(SETUP_DIRECT), medians.get(SETUP_PROXIED)) {
        println!(
            "setup the proxy adds: {:.3} ms",
            (proxied.as_secs_f64() - direct.as_secs_f64()) * 1e3
        );
    }
}

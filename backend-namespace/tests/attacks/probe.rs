//! The probe: this test binary, bound read-only into a run at `/probe/attacks` and
//! started with `--exact attack_probe_role`, plays one role chosen by an
//! environment variable and prints `probe: <what>=ok` or `probe: <what>=err <errno>`.
//! It needs no tool (socat, nc, python) to exist on the host.

use std::io::BufRead;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{self, UnixListener, UnixStream};
use std::time::Duration;

/// Runs `role` with `arg` (see the module docs).
pub fn play(role: &str, arg: &str) {
    match role {
        "tcp-connect" => {
            let own = TcpListener::bind("127.0.0.1:0").unwrap();
            report(
                "own-loopback",
                TcpStream::connect(own.local_addr().unwrap()),
            );
            let port: u16 = arg.parse().unwrap();
            let host = SocketAddr::from(([127, 0, 0, 1], port));
            report(
                "host-port",
                TcpStream::connect_timeout(&host, Duration::from_secs(2)),
            );
        }
        "abstract-connect" => {
            let own = net::SocketAddr::from_abstract_name(format!("{arg}-inside")).unwrap();
            let _listener = UnixListener::bind_addr(&own).unwrap();
            report("own-abstract", UnixStream::connect_addr(&own));
            let host = net::SocketAddr::from_abstract_name(arg).unwrap();
            report("host-abstract", UnixStream::connect_addr(&host));
        }
        "path-connect" => {
            let own = "/tmp/own.sock";
            let _listener = UnixListener::bind(own).unwrap();
            report("own-path", UnixStream::connect(own));
            report("host-path", UnixStream::connect(arg));
        }
        "tcp-hold-stdin" | "tcp-hold-forever" => {
            let port: u16 = arg.parse().unwrap();
            let listener = TcpListener::bind(("127.0.0.1", port));
            let held = listener.is_ok();
            match &listener {
                Ok(_) => println!("probe: bound=ok"),
                Err(e) => println!("probe: bound=err {}", e.raw_os_error().unwrap_or(-1)),
            }
            if held && role == "tcp-hold-stdin" {
                let mut line = String::new();
                std::io::stdin().lock().read_line(&mut line).unwrap();
            } else if held {
                loop {
                    std::thread::sleep(Duration::from_secs(60));
                }
            }
        }
        "memory" => {
            let mib: usize = arg.parse().unwrap();
            // `vec![1; n]` writes every byte, so every page is really charged.
            let block = vec![1u8; mib << 20];
            std::hint::black_box(&block);
            println!("probe: allocated={mib}MiB");
        }
        other => panic!("unknown probe role {other:?}"),
    }
}

fn report<T>(what: &str, result: std::io::Result<T>) {
    match result {
        Ok(_) => println!("probe: {what}=ok"),
        Err(e) => println!("probe: {what}=err {}", e.raw_os_error().unwrap_or(-1)),
    }
}

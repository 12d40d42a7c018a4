//! A TCP connection from the host into a live sandbox's network namespace.
//!
//! A socket belongs to the network namespace it was created in, and a thread
//! may change its own network namespace (`setns(CLONE_NEWNET)` applies to the
//! calling thread only, unlike a user or mount namespace). So a short-lived
//! thread of its own enters the sandbox's network namespace through the
//! sandbox's pidfd, connects, and ends; the connected socket goes on working in
//! the host's runtime. No other thread of the host ever changes namespace.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::OwnedFd;
use std::time::Duration;

use nix::sched::{CloneFlags, setns};

use super::error::ProcessError;

/// Connects to `127.0.0.1:port` inside the network namespace of the sandbox
/// whose pidfd is `sandbox`, within `timeout`. Blocking.
pub(super) fn connect(
    sandbox: OwnedFd,
    port: u16,
    timeout: Duration,
) -> Result<TcpStream, ProcessError> {
    let connected = std::thread::Builder::new()
        .name("aw-connect".into())
        .spawn(move || {
            setns(&sandbox, CloneFlags::CLONE_NEWNET).map_err(|e| {
                std::io::Error::other(format!("entering the sandbox's network namespace: {e}"))
            })?;
            let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            TcpStream::connect_timeout(&address, timeout)
        })
        .map_err(|source| ProcessError::Pipe {
            step: "starting the thread that connects into the sandbox",
            source,
        })?
        .join()
        .map_err(|_| ProcessError::Task {
            step: "connecting into the sandbox",
            message: "the connecting thread panicked".into(),
        })?;
    connected.map_err(|source| ProcessError::Connect { port, source })
}

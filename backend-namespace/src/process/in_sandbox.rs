//! Work in one of a live sandbox's namespaces, from a thread of its own.
//!
//! A thread may change its own network or UTS namespace (`setns` with
//! `CLONE_NEWNET` or `CLONE_NEWUTS` applies to the calling thread only, unlike a
//! user or mount namespace). So a short-lived thread enters the namespace
//! through the sandbox's pidfd, does one thing there and ends: a socket it
//! connected goes on working in the runner's runtime (a socket belongs to the
//! network namespace it was created in); a hostname it read is the sandbox's.
//! No other thread of the host ever changes namespace.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::OwnedFd;
use std::time::Duration;

use nix::sched::{CloneFlags, setns};

use super::error::ProcessError;
use crate::spawn::Sandbox;

/// Work started on a thread of its own inside one of a sandbox's namespaces.
pub(super) struct InNamespace<T> {
    thread: std::thread::JoinHandle<std::io::Result<T>>,
    step: &'static str,
}

impl<T> InNamespace<T> {
    /// Waits for the work's result.
    pub(super) fn wait(self) -> Result<std::io::Result<T>, ProcessError> {
        let step = self.step;
        self.thread
            .join()
            .map_err(|_| ProcessError::ThreadPanicked { step })
    }
}

/// Starts `work` on a new thread inside the `namespace` of `sandbox`.
fn start_in_namespace<T: Send + 'static>(
    sandbox: &Sandbox,
    namespace: CloneFlags,
    step: &'static str,
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<InNamespace<T>, ProcessError> {
    let sandbox: OwnedFd = sandbox
        .entry_pidfd()
        .try_clone_to_owned()
        .map_err(|source| ProcessError::Pipe {
            step: "duplicating the sandbox's pidfd",
            source,
        })?;
    let thread = std::thread::Builder::new()
        .name("aw-in-sandbox".into())
        .spawn(move || {
            setns(&sandbox, namespace).map_err(|e| {
                std::io::Error::other(format!("entering the sandbox's namespace: {e}"))
            })?;
            work()
        })
        .map_err(|source| ProcessError::Pipe { step, source })?;
    Ok(InNamespace { thread, step })
}

/// Runs `work` on a new thread inside the `namespace` of `sandbox`.
fn in_namespace<T: Send + 'static>(
    sandbox: &Sandbox,
    namespace: CloneFlags,
    step: &'static str,
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<std::io::Result<T>, ProcessError> {
    start_in_namespace(sandbox, namespace, step, work)?.wait()
}

/// Connects to `127.0.0.1:port` inside the sandbox's network namespace, within
/// `timeout`. Blocking.
pub(super) fn connect(
    sandbox: &Sandbox,
    port: u16,
    timeout: Duration,
) -> Result<TcpStream, ProcessError> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    in_namespace(
        sandbox,
        CloneFlags::CLONE_NEWNET,
        "connecting into the sandbox",
        move || TcpStream::connect_timeout(&address, timeout),
    )?
    .map_err(|source| ProcessError::Connect { port, source })
}

/// Tries a direct connection from inside the sandbox's network namespace to
/// `address`, within `timeout`: the error it fails with (`None`: it
/// connected). Blocking.
pub(super) fn connect_out(
    sandbox: &Sandbox,
    address: SocketAddr,
    timeout: Duration,
) -> Result<Option<std::io::Error>, ProcessError> {
    Ok(in_namespace(
        sandbox,
        CloneFlags::CLONE_NEWNET,
        "connecting out of the sandbox",
        move || TcpStream::connect_timeout(&address, timeout),
    )?
    .err())
}

/// Starts reading the sandbox's hostname in its UTS namespace; the result
/// comes with [`InNamespace::wait`].
pub(super) fn hostname(sandbox: &Sandbox) -> Result<InNamespace<String>, ProcessError> {
    start_in_namespace(
        sandbox,
        CloneFlags::CLONE_NEWUTS,
        "reading the sandbox's hostname",
        || {
            nix::unistd::gethostname()
                .map_err(std::io::Error::from)
                .map(|name| name.to_string_lossy().into_owned())
        },
    )
}
